"""Trace loaders: real and synthetic workloads as lists of ScenarioJob.

Every loader returns jobs sorted by submit time, rebased so the first submits at 0, named
"j{row index in file order}", with project = the trace's team as a DNS-1123 label, user = the
trace's user (else the project), resources split into workers of at most gpus_per_node, and
duration >= 1 s.
"""

from __future__ import annotations

from pathlib import Path

from corral.formats.types import FormatError
from corral.sim.traces.common import TraceLoad
from corral.sim.traces.filters import first, only_projects, rebase, window
from corral.sim.traces.helios import load_helios_csv
from corral.sim.traces.philly import load_philly_csv
from corral.sim.traces.philly_json import load_philly_json
from corral.sim.traces.shares import derive_quota
from corral.sim.traces.synthetic import synthetic

LOADERS = {
    "philly": load_philly_csv,
    "philly-json": load_philly_json,
    "helios": load_helios_csv,
}

__all__ = [
    "LOADERS",
    "TraceLoad",
    "derive_quota",
    "first",
    "load_helios_csv",
    "load_philly_csv",
    "load_philly_json",
    "load_trace",
    "only_projects",
    "rebase",
    "sniff_format",
    "synthetic",
    "window",
]


def load_trace(path: str | Path, fmt: str | None = None, **kw) -> TraceLoad:
    """Load a trace file with the loader for `fmt`, or the one its name and header suggest.

    `kw` goes to the loader: accelerator, gpus_per_node, skip_bad.
    """
    fmt = fmt or sniff_format(path)
    if fmt not in LOADERS:
        raise FormatError(f"trace format: must be one of {', '.join(LOADERS)}, got {fmt!r}")
    return LOADERS[fmt](path, **kw)


def sniff_format(path: str | Path) -> str:
    """.json -> philly-json; a CSV header with num_gpus -> philly, with gpu_num -> helios."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return "philly-json"
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            header = f.readline()
    except OSError as err:
        raise FormatError(f"{path}: cannot read trace: {err.strerror}") from None
    columns = {c.strip().strip('"') for c in header.split(",")}
    if "num_gpus" in columns:
        return "philly"
    if "gpu_num" in columns:
        return "helios"
    raise FormatError(
        f"{path.name}:1: cannot tell the trace format: expected a .json file or a CSV header "
        f"with num_gpus (philly) or gpu_num (helios); pass the format explicitly"
    )
