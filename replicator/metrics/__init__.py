"""Operating the engine: the run loop's observer (no-op by default) and its Prometheus
implementation serving /metrics and /healthz."""

from replicator.metrics.observer import NULL_OBSERVER, Observer, reason_kind
from replicator.metrics.prometheus import PrometheusObserver, parse_listen

__all__ = ["NULL_OBSERVER", "Observer", "PrometheusObserver", "parse_listen", "reason_kind"]
