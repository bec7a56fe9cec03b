"""Break the real ops_mapping source in a scratch copy and see which property tests fail.

    .venv/bin/python tests/ops_mapping/mutants.py [--examples N] [--only NAME]

Not a test (pytest does not collect it): each mutant copies ``ops_mapping/`` and
``tests/ops_mapping/`` to a temporary directory, applies one textual change, and runs
``test_properties.py`` there with that copy first on PYTHONPATH. A mutant is *killed* when at
least one property test fails. The baseline (no change) must pass. Nothing in the repository
is modified.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTEST = ROOT / ".venv" / "bin" / "pytest"
PYTHON = ROOT / ".venv" / "bin" / "python"


@dataclass(frozen=True)
class Mutant:
    name: str
    why: str
    file: str  # relative to the scratch root
    old: str
    new: str


MUTANTS = [
    Mutant(
        "eq-instead-of-pos-before",
        "a 'u'/'d' of a key written in this batch uses an equality delete, not a position delete",
        "ops_mapping/mapper.py",
        "old = live_pop(bk, None)\n",
        "live_pop(bk, None)\n                old = None\n",
    ),
    Mutant(
        "no-pos-delete-on-reinsert",
        "writing a key already written in this batch does not position-delete the older row",
        "ops_mapping/mapper.py",
        "old = live_get(ak)\n",
        "old = None\n",
    ),
    Mutant(
        "delete-keeps-key-in-map",
        "a delete position-deletes the row but leaves the key in the map (get, not pop)",
        "ops_mapping/mapper.py",
        "old = live_pop(bk, None)\n",
        "old = live_get(bk)\n",
    ),
    Mutant(
        "no-upsert-for-c-r",
        "'c'/'r' never equality-delete their key, whatever the policy",
        "ops_mapping/mapper.py",
        'upsert = upsert_c if op == "c" else upsert_r\n',
        "upsert = False\n",
    ),
    Mutant(
        "no-upsert-on-key-change",
        "a key-changing 'u' never upserts its new key",
        "ops_mapping/mapper.py",
        "upsert = upsert_c and ak != bk\n",
        "upsert = False\n",
    ),
    Mutant(
        "eq-deletes-not-deduplicated",
        "every delete of an unknown key emits an equality delete, repeats included",
        "ops_mapping/mapper.py",
        "elif bk not in eq_done:\n",
        "elif True:\n",
    ),
    Mutant(
        "key-change-keeps-old-key",
        "a key-changing 'u' writes the new row but never deletes the old key",
        "ops_mapping/mapper.py",
        'if op == "u" or op == "d":\n',
        'if op == "d" or (op == "u" and ak == bk):\n',
    ),
    Mutant(
        "position-deletes-unsorted",
        "finish keeps position deletes in event order instead of sorting them",
        "ops_mapping/mapper.py",
        "ordinals = sorted(self._pos_ordinals)\n",
        "ordinals = list(self._pos_ordinals)\n",
    ),
    Mutant(
        "slice-first-pos-zero",
        "every data slice claims to start at position 0 of its file",
        "ops_mapping/sizing.py",
        "Placement(len(self.file_rows) - 1, self.file_rows[-1], offset, length)",
        "Placement(len(self.file_rows) - 1, 0, offset, length)",
    ),
    Mutant(
        "rolling-ignores-earlier-chunks",
        "file rolling forgets bytes the current file got from earlier chunks",
        "ops_mapping/sizing.py",
        "room = self.target_bytes - self.file_bytes[-1]\n",
        "room = self.target_bytes\n",
    ),
    Mutant(
        "model-eq-deletes-same-commit",
        "model: equality deletes also remove rows of their own commit (<= instead of <)",
        "ops_mapping/iceberg_semantics.py",
        "if eq_seq.get(self.key_of(row), 0) > f.sequence_number:",
        "if eq_seq.get(self.key_of(row), 0) >= f.sequence_number:",
    ),
    Mutant(
        "model-pos-deletes-older-only",
        "model: position deletes only remove rows of older commits (< instead of <=)",
        "ops_mapping/iceberg_semantics.py",
        "if pos_seq.get((f.file_id, p), 0) >= f.sequence_number:",
        "if pos_seq.get((f.file_id, p), 0) > f.sequence_number:",
    ),
    Mutant(
        "batches-share-a-commit",
        "every batch after the first is committed under the previous batch's sequence number",
        "ops_mapping/iceberg_semantics.py",
        "return table.commit(parts.data_files, parts.position_deletes, parts.equality_deletes)",
        "return table.commit(parts.data_files, parts.position_deletes, parts.equality_deletes,"
        " sequence_number=max(table.last_sequence_number, 1))",
    ),
]


def run_one(mutant: Mutant | None, examples: int) -> tuple[list[str], float]:
    """Failing property test names under ``mutant`` (None: the unmodified baseline)."""
    with tempfile.TemporaryDirectory(prefix="ops_mutant_") as tmp:
        scratch = Path(tmp)
        shutil.copytree(ROOT / "ops_mapping", scratch / "ops_mapping")
        shutil.copytree(ROOT / "tests" / "ops_mapping", scratch / "tests" / "ops_mapping")
        if mutant is not None:
            target = scratch / mutant.file
            text = target.read_text()
            if text.count(mutant.old) != 1:
                raise SystemExit(f"{mutant.name}: pattern found {text.count(mutant.old)} times")
            target.write_text(text.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONPATH": str(scratch), "OPS_MAPPING_EXAMPLES": str(examples)}
        where = subprocess.run(
            [str(PYTHON), "-c", "import ops_mapping.mapper as m; print(m.__file__)"],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(scratch)):
            raise SystemExit(f"scratch copy not imported: {where}")
        start = time.perf_counter()
        proc = subprocess.run(
            [
                str(PYTEST),
                "-q",
                "-p",
                "no:cacheprovider",
                "--import-mode=importlib",
                f"--rootdir={scratch}",
                "tests/ops_mapping/test_properties.py",
            ],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
        failed = re.findall(r"^FAILED \S+::(\w+)", proc.stdout, re.MULTILINE)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"pytest error {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return failed, elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    failed, elapsed = run_one(None, args.examples)
    print(f"baseline: {failed if failed else 'ok'} ({elapsed:.1f} s)")
    if failed:
        sys.exit(1)
    survivors = 0
    for m in MUTANTS:
        if args.only and m.name != args.only:
            continue
        failed, elapsed = run_one(m, args.examples)
        survivors += not failed
        verdict = "KILLED by " + ", ".join(failed) if failed else "SURVIVED"
        print(f"{m.name}: {m.why}\n    {verdict} ({elapsed:.1f} s)")
    sys.exit(1 if survivors else 0)


if __name__ == "__main__":
    main()
