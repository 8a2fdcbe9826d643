"""run.Drawer: charts drawn in forks of a warm drawing process, each error brought back."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.sim.run import Drawer


def _chart(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _broken_chart(path: Path) -> Path:
    raise ValueError(f"cannot draw {path.name}")


def test_charts_drawn_aside_are_all_written(tmp_path: Path) -> None:
    with Drawer(aside=True) as drawer:
        for i in range(4):
            drawer.draw(_chart, tmp_path / f"{i}.txt", f"chart {i}")
    assert [(tmp_path / f"{i}.txt").read_text() for i in range(4)] == [
        f"chart {i}" for i in range(4)
    ]


def test_an_error_drawing_aside_is_raised_on_leaving(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^cannot draw b\.png$"), Drawer(aside=True) as drawer:
        drawer.draw(_chart, tmp_path / "a.txt", "fine")
        drawer.draw(_broken_chart, tmp_path / "b.png")
    assert (tmp_path / "a.txt").read_text() == "fine"  # the others are still drawn
