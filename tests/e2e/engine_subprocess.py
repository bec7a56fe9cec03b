"""``run --until-idle`` in a subprocess with a source built in code (settings that are not
config keys, such as small snapshot chunks), optionally dying at a crash point
(``replicator.pipeline.crashpoints``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from replicator.pipeline.crashpoints import ENV

# ``make_source`` runs with ``cfg`` (the loaded config), ``dead_letters`` and ``argv`` (the
# extra arguments, as strings) in scope, and binds ``src``.
SCRIPT = """
import sys
from pathlib import Path
from replicator.config import load_config
from replicator.events.deadletter import DeadLetterSink
from replicator.pipeline.runner import Replicator
cfg = load_config(Path(sys.argv[1]))
dead_letters = DeadLetterSink(cfg.dead_letter_path)
argv = sys.argv[3:]
{make_source}
Replicator(cfg, engine=sys.argv[2], source=src).run(until_idle=True)
"""


def run_engine(
    cfg: Path, make_source: str, args: Sequence[object], *, crash_at: str | None = None,
    engine: str = "local",
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """The engine on ``cfg`` until idle (or until it dies at ``crash_at``), in its folder."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if crash_at:
        env[ENV] = crash_at
    script = SCRIPT.format(make_source=make_source)
    return subprocess.run([sys.executable, "-c", script, str(cfg), engine, *map(str, args)], cwd=cfg.parent,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
