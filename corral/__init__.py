"""corral: a fair-share gang scheduler for shared accelerator pools, and its trace simulator."""

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path


class SourceFirst(MetaPathFinder):
    """Loads the compiled modules from their sources. Compiled modules call each other
    directly, not through Python: one module cannot fall back alone, so all of them do."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        source = self.sources.get(name)
        return None if source is None else spec_from_file_location(name, source)


def fall_back_if_stale(package: Path) -> None:
    """In a source checkout built with mypyc (`pip install -e .`), Python loads a module's
    compiled copy before its source: one edited since the build would silently run old code.
    Then the whole core runs as plain Python (the same behaviour, slower), with one warning."""
    if not (package.parent / "setup.py").exists():
        return  # an installed wheel: sources and builds come together
    sources, stale = {}, None
    for built in sorted(package.glob("*/*.so")):
        source = built.with_name(built.name.split(".", 1)[0] + ".py")
        if source.exists():
            sources[f"{package.name}.{source.parent.name}.{source.stem}"] = source
            if stale is None and source.stat().st_mtime > built.stat().st_mtime:
                stale = source
    if stale is not None:
        print(
            f"corral: {stale} changed after it was compiled; running the core as plain Python "
            "(rebuild: pip install -e .)",
            file=sys.stderr,
        )
        sys.meta_path.insert(0, SourceFirst(sources))


fall_back_if_stale(Path(__file__).parent)
