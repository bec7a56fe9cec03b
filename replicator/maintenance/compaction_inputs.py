"""Which data files one compaction step rewrites: pure, from sizes and delete hits only.

A data file smaller than ``SMALL_FRACTION`` of the target is a candidate, and so is any file
that position deletes name (rewriting it is what applies them). Plain bin-packing of every
candidate rewrites the growing output again and again: an initial snapshot of a 10M-row table
adds a file per batch, and each step copied the whole table so far into one file until it
neared the target (quadratic: its rate fell from 78k to 9k rows/s).

So candidates without deletes are merged by size tiers: sorted by size, a group grows from
some file by the next larger one only while that one is at most ``TIER_RATIO`` (2) times the
group so far. A file is then rewritten only into an output at least 1.5 times its size, so a
row is copied at most about log1.5(target / smallest file) times; and files that cannot group
are few (their sizes at least triple every ``min_input_files - 1`` files). Files with deletes
join every step, first, as before.

A file counts as having deletes only once they delete ``min_deleted_share`` of its rows;
below that it is merged by size like a clean file (its deletes applied when it is): random
updates over a big table touch most of its files at every batch, and rewriting each at every
step copies the table again and again (Iceberg's ``delete-ratio-threshold`` makes the same
trade; ``benchmarks.micro deleted-share`` measures it). The deletes stay in the
position-delete files meanwhile (merged per partition: ``position_deletes``).

Cheap rewrites (``small_file_bytes``, ``maintenance.compact_small_file_bytes``; 0: off): a
file below that size costs little to rewrite, while every extra file and every deletion
vector costs each reader (1-3 ms per vector in pyiceberg, a task per file in Spark). So the
files below it are rewritten together, their deletes applied, as soon as one of them carries
any delete or two of them exist: a small table, and the small tail of a big one, stay one
file without deletes. Files above it keep the share threshold and the size tiers. Rewriting
a growing small file again at every step is quadratic below the bound; the scheduler paces
it (``compact_max_time_share``), so the copying stays a bounded share of the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A data file at least this share of the target is "big enough" (unless deletes hit it).
SMALL_FRACTION = 0.75
# One compaction step reads at most this many target sizes of input (a bounded slice).
MAX_INPUT_TARGETS = 4
# A clean file joins a group when its size is at most this times the group's size so far
# (above 1: files of nearly equal size must group).
TIER_RATIO = 2.0


@dataclass(frozen=True, slots=True)
class Candidate:
    path: str
    size: int  # bytes
    hit: bool  # named by a live position-delete file
    deleted_share: float = 1.0  # share of its rows those deletes delete (when hit)


def choose_inputs(
    files: Sequence[Candidate], *, target_file_bytes: int, min_input_files: int, delete_files: int,
    min_deleted_share: float = 0.0, small_file_bytes: int = 0,
) -> list[Candidate]:
    """The files one step rewrites, in path (write) order; empty when no step is due.

    Due when the group holds ``min_input_files`` files, or when it rewrites files with deletes
    and the table has ``min_input_files`` position-delete files; never for one clean file. A
    file's deletes count only from ``min_deleted_share`` of its rows on. Also due when a file
    below ``small_file_bytes`` has any delete or two such files exist: then all of them join
    (within the step's input budget)."""
    chosen = _by_size(files, target_file_bytes=target_file_bytes, min_input_files=min_input_files,
                      delete_files=delete_files, min_deleted_share=min_deleted_share)  # fmt: skip
    cheap = cheap_inputs(files, small_file_bytes)
    if not cheap:
        return chosen
    picked = {f.path: f for f in chosen}
    total = sum(f.size for f in chosen)
    for f in cheap:
        if f.path not in picked and total + f.size <= MAX_INPUT_TARGETS * target_file_bytes:
            picked[f.path] = f
            total += f.size
    return sorted(picked.values(), key=lambda f: f.path)


def cheap_inputs(files: Sequence[Candidate], small_file_bytes: int) -> list[Candidate]:
    """The files below ``small_file_bytes`` (path order) when one of them has any delete or
    there are two of them, else none (0: the rule is off)."""
    if small_file_bytes <= 0:
        return []
    cheap = sorted((f for f in files if f.size < small_file_bytes), key=lambda f: f.path)
    return cheap if len(cheap) >= 2 or any(f.hit for f in cheap) else []


def _by_size(
    files: Sequence[Candidate], *, target_file_bytes: int, min_input_files: int, delete_files: int,
    min_deleted_share: float,
) -> list[Candidate]:
    """``choose_inputs`` without the cheap rule: share threshold and size tiers."""
    files = [f if not f.hit or f.deleted_share >= min_deleted_share else Candidate(f.path, f.size, False, 0.0)
             for f in files]  # fmt: skip
    small = [f for f in files if f.hit or f.size < SMALL_FRACTION * target_file_bytes]
    budget = MAX_INPUT_TARGETS * target_file_bytes
    hit: list[Candidate] = []
    total = 0
    for f in sorted((f for f in small if f.hit), key=lambda f: f.path):
        if hit and total + f.size > budget:
            break
        hit.append(f)
        total += f.size
    clean = sorted((f for f in small if not f.hit), key=lambda f: (f.size, f.path))
    best: list[Candidate] = []
    for start in range(len(clean)):
        group = _tier_group(clean, start, total, budget)
        if len(group) > len(best):
            best = group
        if len(hit) + len(best) >= min_input_files:
            break
    chosen = hit + best
    if hit and (len(chosen) >= min_input_files or delete_files >= min_input_files):
        return sorted(chosen, key=lambda f: f.path)
    if not hit and len(chosen) >= max(min_input_files, 2):
        return sorted(chosen, key=lambda f: f.path)
    return []


def _tier_group(clean: Sequence[Candidate], start: int, base: int, budget: int) -> list[Candidate]:
    """Clean files from ``start`` on (ascending size) while each is at most ``TIER_RATIO``
    times what the group holds so far (``base``: the files with deletes it joins)."""
    group: list[Candidate] = []
    total = base
    for f in clean[start:]:
        if (group or base) and (f.size > TIER_RATIO * total or total + f.size > budget):
            break
        group.append(f)
        total += f.size
    return group
