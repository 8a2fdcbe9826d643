"""corral: a fair-share gang scheduler for shared accelerator pools, and its trace simulator."""

from pathlib import Path


def refuse_stale_build(package: Path) -> None:
    """In a source checkout built with mypyc (`pip install -e .`), Python loads a module's
    compiled copy before its source: one edited since the build would silently run old code."""
    if not (package.parent / "setup.py").exists():
        return  # an installed wheel: sources and builds come together
    for built in package.glob("*/*.so"):
        source = built.with_name(built.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            raise ImportError(
                f"{source} changed after it was compiled: rebuild with `pip install -e .`, or "
                "run it as plain Python: `find corral -name '*.so' -delete`"
            )


refuse_stale_build(Path(__file__).parent)
