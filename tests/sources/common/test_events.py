import pytest

from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.common.events import BadKey, event_maker

make_event = event_maker("postgres")


@pytest.mark.parametrize(
    ("op", "before", "after"),
    [(Op.CREATE, None, {"id": 1}), (Op.UPDATE, {"id": 1}, {"id": 2}), (Op.UPDATE, None, {"id": 1}),
     (Op.DELETE, {"id": 1}, None), (Op.TRUNCATE, None, None), (Op.READ, None, {"id": 1})],
)  # fmt: skip
def test_the_hot_path_builds_what_the_constructor_builds(op, before, after) -> None:
    got = make_event("s.t", op, before, after, (5, 2), None, 17, "9", True)
    want = ChangeEvent("s.t", op, before, after, position=SourcePosition("postgres", (5, 2)),
                       ts_ms=17, tx_id="9", last_in_tx=True)  # fmt: skip
    assert got == want
    assert type(got.position.parts) is tuple and got.error is None
    with pytest.raises(AttributeError):
        got.op = Op.DELETE  # type: ignore[misc]


@pytest.mark.parametrize(("op", "before", "after"), [(Op.CREATE, None, None), (Op.DELETE, None, None)])
def test_missing_images_still_raise_the_constructors_error(op, before, after) -> None:
    with pytest.raises(ValueError, match="needs"):
        make_event("s.t", op, before, after, (5, 2), None, None, None, False)


def test_parts_that_are_not_a_tuple_become_one() -> None:
    ev = make_event("s.t", Op.CREATE, None, {"id": 1}, [5, 2], None, None, None, False)  # type: ignore[arg-type]
    assert ev.position == SourcePosition("postgres", (5, 2))


def test_a_bad_key_makes_an_event_with_its_error() -> None:
    ev = make_event("s.t", Op.UPDATE, BadKey({"id": 1}, "no"), None, (5, 2), None, None, None, True)
    assert ev.error == "no" and ev.before == {"id": 1} and type(ev.before) is dict and ev.after is None
