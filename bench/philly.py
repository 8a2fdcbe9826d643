"""Where the benches find the Philly trace: shared/ next to the repository, or next to a
folder above it (a worktree in a subfolder)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = next(
    (d / "shared/traces/philly/philly.csv" for d in REPO.parents if (d / "shared").is_dir()),
    REPO.parent / "shared/traces/philly/philly.csv",
)
