"""Are two `corral simulate --out` folders the same results? For a change meant only to make
the command faster: run it before and after into two folders, then

    python bench/compare_out.py BEFORE_DIR AFTER_DIR

Every file must be in both and equal byte for byte, except the engine's own timings in the
summaries (sim_wall_s, sim_jobs_per_s: JSON otherwise equal) and PNGs, whose pixels are
compared where the bytes differ. Prints a line per file; exit status 1 on any difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

TIMINGS = {"sim_wall_s", "sim_jobs_per_s"}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    a, b = (Path(p) for p in argv)
    for folder in (a, b):
        if not folder.is_dir():
            print(f"{folder}: not a folder", file=sys.stderr)
            return 2
    files = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    others = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    bad = 0
    for rel in sorted(files ^ others):
        print(f"ONLY IN {a if rel in files else b}: {rel}")
        bad += 1
    for rel in sorted(files & others):
        verdict = compare(a / rel, b / rel)
        bad += verdict.startswith("DIFFERENT")
        print(f"{verdict:20} {rel}")
    print("all the same" if not bad else f"{bad} differences")
    return 1 if bad else 0


def compare(x: Path, y: Path) -> str:
    if x.read_bytes() == y.read_bytes():
        return "same bytes"
    if x.suffix == ".json" and _untimed(json.loads(x.read_text())) == _untimed(
        json.loads(y.read_text())
    ):
        return "same but timings"
    if x.suffix == ".png":
        with Image.open(x) as i, Image.open(y) as j:
            if i.size == j.size and np.array_equal(np.asarray(i), np.asarray(j)):
                return "same pixels"
    return "DIFFERENT"


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMINGS}
    return value


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
