"""Everything about where a table stands against its source (see ``model``), what a source
may replay (``replay``), and how the checkpoint is read from and written to a table
(``table``). Sources, the Iceberg layer and the pipeline all go through here."""

from replicator.checkpoint.model import Checkpoint, Checkpoints
from replicator.checkpoint.replay import EXACT, BatchPlan, ReplayWindow, plan_batch
from replicator.checkpoint.table import (
    CHECKPOINT_PROPERTY,
    checkpoint_at,
    checkpoint_commit_properties,
    read_checkpoint,
)

__all__ = [
    "CHECKPOINT_PROPERTY",
    "EXACT",
    "BatchPlan",
    "Checkpoint",
    "Checkpoints",
    "ReplayWindow",
    "checkpoint_at",
    "checkpoint_commit_properties",
    "plan_batch",
    "read_checkpoint",
]
