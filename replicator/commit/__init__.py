"""The commit protocol: a pure state machine per table (``machine.TableCommit``), its rules
(``rules``), the messages it exchanges (``protocol``) and a driver over I/O ports
(``driver``). No I/O here: the pipeline implements the ports."""

from replicator.commit.driver import (
    CommitAll,
    StageRunner,
    TablePort,
    drive,
    drive_together,
    write_together,
)
from replicator.commit.machine import MAX_COMMIT_ATTEMPTS, Action, Input, TableCommit
from replicator.commit.protocol import (
    FINAL,
    CommitAnswer,
    CommitFiles,
    Discarded,
    DiscardFiles,
    Done,
    Fail,
    Phase,
    ReadTable,
    Staged,
    StageEvents,
    StageRefused,
    Stop,
    TableRead,
    WriteFiles,
    Written,
)
from replicator.commit.rules import (
    SpilledRange,
    after_last_truncate,
    fence_error,
    not_yet_in,
    spill_needed,
)

__all__ = [
    "CommitAll",
    "SpilledRange",
    "spill_needed",
    "FINAL",
    "MAX_COMMIT_ATTEMPTS",
    "Action",
    "CommitAnswer",
    "CommitFiles",
    "DiscardFiles",
    "Discarded",
    "Done",
    "Fail",
    "Input",
    "Phase",
    "ReadTable",
    "StageEvents",
    "StageRefused",
    "StageRunner",
    "Staged",
    "Stop",
    "TableCommit",
    "TablePort",
    "TableRead",
    "WriteFiles",
    "Written",
    "after_last_truncate",
    "drive",
    "drive_together",
    "fence_error",
    "not_yet_in",
    "write_together",
]
