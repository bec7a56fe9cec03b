"""Events and a spill recorder shared by the batcher's spill and staged-as-filled tests."""

from collections.abc import Mapping, Sequence

from replicator.events.model import ChangeEvent, Op, SourcePosition


def ev(i: int, tx: str | None, last: bool, table: str = "s.t", op: Op = Op.CREATE) -> ChangeEvent:
    return ChangeEvent(
        table=table, op=op, after={"id": i}, position=SourcePosition(source="x", parts=(i,)),
        tx_id=tx, last_in_tx=last,
    )


class Recorder:
    """What each spill call was handed: table -> the events' position numbers."""

    def __init__(self) -> None:
        self.spills: list[dict[str, list[int]]] = []

    def __call__(self, events: Mapping[str, Sequence[ChangeEvent]]) -> None:
        self.spills.append({t: [int(e.position.parts[0]) for e in evs] for t, evs in events.items()})
