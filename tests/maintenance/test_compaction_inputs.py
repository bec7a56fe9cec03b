"""Which files a compaction step rewrites: size tiers bound how often a row is copied."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.maintenance.compaction_inputs import (
    MAX_INPUT_TARGETS,
    SMALL_FRACTION,
    Candidate,
    cheap_inputs,
    choose_inputs,
)

MB = 1 << 20
TARGET = 128 * MB


def clean(*sizes_mb: float) -> list[Candidate]:
    return [Candidate(f"f{i:04d}", int(s * MB), False) for i, s in enumerate(sizes_mb)]


def sizes(files: list[Candidate]) -> list[float]:
    return sorted(f.size / MB for f in files)


def choose(files: list[Candidate], *, m: int = 4, deletes: int = 0) -> list[Candidate]:
    return choose_inputs(files, target_file_bytes=TARGET, min_input_files=m, delete_files=deletes)


def test_similar_batch_files_are_merged() -> None:
    assert sizes(choose(clean(3, 3, 3, 3))) == [3, 3, 3, 3]
    assert choose(clean(3, 3, 3)) == []  # not yet min_input_files


def test_a_big_file_waits_until_the_small_ones_add_up_to_it() -> None:
    # Plain bin-packing copied the 60 MB output of earlier steps at every step.
    assert sizes(choose(clean(60, 3, 3, 3, 3))) == [3, 3, 3, 3]
    assert sizes(choose(clean(60, 12, 3, 3, 3, 3))) == [3, 3, 3, 3, 12]
    assert sizes(choose(clean(60, 24, 12, 12, 6, 6))) == [6, 6, 12, 12, 24, 60]


def test_a_group_may_start_above_the_smallest_file() -> None:
    assert sizes(choose(clean(1, 10, 10, 10, 10))) == [10, 10, 10, 10]


def test_big_enough_files_are_left_alone() -> None:
    big = SMALL_FRACTION * TARGET / MB + 1
    assert choose(clean(big, big, big, big, 3)) == []


def test_files_with_deletes_always_join() -> None:
    files = [*clean(3, 3), Candidate("hit-big", 200 * MB, True)]
    # Due by the position-delete files' count; the clean ones are smaller than the group.
    got = choose(files, deletes=4)
    assert [f.path for f in got] == ["f0000", "f0001", "hit-big"]
    assert choose(files, deletes=1) == []  # three files, one delete file: not due


def test_one_step_reads_a_bounded_amount() -> None:
    files = clean(*([90] * 12))
    got = choose(files)
    assert sum(f.size for f in got) <= MAX_INPUT_TARGETS * TARGET
    assert len(got) == 5  # 450 MB of 512


def _split(total: int) -> list[int]:
    """What a rewrite of ``total`` bytes writes: target-size files and the rest."""
    out = [TARGET] * (total // TARGET)
    return out + ([total % TARGET] if total % TARGET else [])


@settings(max_examples=200, deadline=None)
@given(
    appends=st.lists(st.integers(min_value=MB // 4, max_value=TARGET // 8), min_size=1, max_size=300),
    m=st.integers(min_value=2, max_value=6),
)
def test_rows_are_copied_a_logarithmic_number_of_times(appends: list[int], m: int) -> None:
    """Batches append files; compaction runs until nothing is due after each. Bytes rewritten
    stay within log1.5(target / smallest file) + 2 times the bytes appended (plain bin-packing
    of a 300-batch snapshot copies each byte about 40 times), and the files below target
    that no step merges stay few."""
    files: list[Candidate] = []
    n = 0
    appended = rewritten = 0
    for size in appends:
        files.append(Candidate(f"f{n:06d}", size, False))
        n += 1
        appended += size
        while picked := choose(files, m=m):
            paths = {f.path for f in picked}
            files = [f for f in files if f.path not in paths]
            total = sum(f.size for f in picked)
            rewritten += total
            for out in _split(total):
                files.append(Candidate(f"f{n:06d}", out, False))
                n += 1
    levels = math.log(TARGET / min(appends), 1.5) + 2
    assert rewritten <= levels * appended
    small = [f for f in files if f.size < SMALL_FRACTION * TARGET]
    assert len(small) <= (m - 1) * (levels + 1)


def test_a_big_file_is_rewritten_for_its_deletes_only_past_the_share() -> None:
    big = int(0.9 * TARGET)

    def files(share: float) -> list[Candidate]:
        return [Candidate("big", big, True, share), *clean(3)]

    def pick(share: float, threshold: float) -> list[str]:
        return [f.path for f in choose_inputs(files(share), target_file_bytes=TARGET, min_input_files=2,
                                              delete_files=4, min_deleted_share=threshold)]  # fmt: skip

    assert pick(0.05, 0.1) == []  # a few random updates: the big file stays
    assert pick(0.1, 0.1) == ["big", "f0000"]  # past the share: rewritten, deletes applied
    assert pick(0.05, 0.0) == ["big", "f0000"]  # threshold 0: as before
    # Below the share a small file is merged by size, like a clean one (deletes applied).
    small = [Candidate("s", 3 * MB, True, 0.01), *clean(3)]
    assert [f.path for f in choose_inputs(small, target_file_bytes=TARGET, min_input_files=2,
                                          delete_files=1, min_deleted_share=0.5)] == ["f0000", "s"]  # fmt: skip
    alone = [Candidate("s", 3 * MB, True, 0.01)]  # with the idle trigger: one file with deletes
    assert choose_inputs(alone, target_file_bytes=TARGET, min_input_files=1, delete_files=1,
                         min_deleted_share=0.5) == []  # fmt: skip
    assert choose_inputs(alone, target_file_bytes=TARGET, min_input_files=1, delete_files=1,
                         min_deleted_share=0.01) == alone  # fmt: skip


def test_cheap_rule_rewrites_small_files_at_any_delete_or_two_of_them() -> None:
    """Below ``small_file_bytes`` a file is rewritten at its first delete, or with one other
    small file; bigger files keep the share threshold; 0 turns the rule off."""
    bound = 32 * MB

    def pick(files: list[Candidate], small: int = bound, m: int = 4) -> list[str]:
        return [f.path for f in choose_inputs(files, target_file_bytes=TARGET, min_input_files=m,
                                              delete_files=1, min_deleted_share=0.1,
                                              small_file_bytes=small)]  # fmt: skip

    vector = [Candidate("a", 1 * MB, True, 0.001)]  # one small file, one deleted row
    assert pick(vector) == ["a"]
    assert pick(vector, small=0) == []  # the old rule: below the share, alone
    two = clean(0.5, 0.3)
    assert pick(two) == ["f0000", "f0001"]
    assert pick(two, small=0) == []  # fewer than min_input_files
    assert pick(clean(0.5)) == []  # one clean file: nothing to do
    # A big file below its deleted share stays; the small tail is merged (deletes applied).
    tail = [Candidate("big", 100 * MB, True, 0.01), Candidate("t1", 1 * MB, True, 0.01), *clean(0.2)]
    assert pick(tail) == ["f0000", "t1"]
    # Past its share the big file joins when the old rule says so, with the small ones.
    past = [Candidate("big", 100 * MB, True, 0.5), *clean(0.2, 0.3)]
    assert pick(past) == ["f0000", "f0001"]
    assert pick(past, m=2) == ["big", "f0000", "f0001"]
    # A file at or above the bound is not cheap: one small file next to it is left alone.
    assert pick([Candidate("b", bound, True, 0.01), *clean(0.2)]) == []
    # Still one step's input budget at most.
    many = clean(*([31.0] * 20))
    assert sum(f.size for f in choose_inputs(many, target_file_bytes=TARGET, min_input_files=4, delete_files=0,
                                             small_file_bytes=bound)) <= MAX_INPUT_TARGETS * TARGET  # fmt: skip


def test_cheap_inputs() -> None:
    assert cheap_inputs(clean(1, 2), 0) == []
    assert [f.path for f in cheap_inputs(clean(40, 1, 2), 32 * MB)] == ["f0001", "f0002"]
    assert cheap_inputs([Candidate("x", MB, True, 0.0)], 32 * MB) == [Candidate("x", MB, True, 0.0)]
