"""PNG charts of simulation results: JCT CDFs, utilisation and queue, per-project shares.

Figures are drawn with the Agg canvas directly (matplotlib.figure.Figure + FigureCanvasAgg),
not through pyplot: nothing global is switched, no window can open, and the functions are
safe to call from threads and servers. Long step series are drawn as time-weighted means over
at most ~1,000 bins, which keeps files small and lines legible without hiding the level.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from corral.sim.metrics import Series, fmt_seconds, resample

MAX_POINTS = 2000  # drawn as they are up to this many points; else binned
BINS = 1000
TOP_PROJECTS = 8
# Tick positions of the log-scaled JCT axis, in seconds, labelled in s/min/h/d: coarse ones
# for wide ranges, finer ones when fewer than three coarse ticks fall in the range.
_H, _D = 3600, 86400
_TICKS = (1, 10, 60, 600, _H, 6 * _H, _D, 7 * _D, 30 * _D, 365 * _D)
_FINE_TICKS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, _H, 2 * _H, 6 * _H, 12 * _H,
               _D, 2 * _D, 7 * _D, 14 * _D, 30 * _D, 90 * _D, 365 * _D)  # fmt: skip


def _figure(width: float, height: float, *, left=0.8, right=0.3, top=0.45, bottom=0.6, **space):
    """A figure with margins in inches. Fixed margins, not constrained layout: that one costs
    seconds per figure re-measuring every tick label, and these layouts never change. Titles
    are placed by hand for the same reason (y=1.0, where matplotlib puts them on these axes:
    the same pixels, for a fifth less of a chart's drawing time)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        top=1 - top / height,
        bottom=bottom / height,
        **space,
    )
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _time_unit(span: float) -> tuple[float, str]:
    """Divisor and name of the time unit that suits a span of `span` seconds."""
    if span >= 3 * 86400:
        return 86400.0, "days"
    if span >= 3 * 3600:
        return 3600.0, "hours"
    if span >= 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _steps(times: np.ndarray, values: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) to draw with drawstyle='steps-post'."""
    return np.append(times, end), np.append(values, values[-1] if len(values) else 0.0)


def binned(series: Series) -> Series:
    """The series as the charts draw it: as it is when short, else its means over BINS equal
    bins (a step function of BINS + 1 points, the last at its end). Binned first, a series
    sent to a process drawing aside is a thousand points a line, not one per instant."""
    times = series.times
    if len(times) <= MAX_POINTS:
        return series
    edges = np.linspace(times[0], times[-1], BINS + 1)

    def means(values: np.ndarray) -> np.ndarray:
        mean = resample(times, values, edges)
        return np.append(mean, mean[-1])

    return Series(
        times=edges,
        busy=means(series.busy),
        queue=means(series.queue),
        held={p: means(v) for p, v in series.held.items()},
        by_accelerator={k: means(v) for k, v in series.by_accelerator.items()},
        capacity=series.capacity,
        active=None if series.active is None else means(series.active),
        bin_s=float(edges[1] - edges[0]),
    )


def _span(series: Series) -> tuple[float, float]:
    if len(series.times) == 0:
        return 0.0, 1.0
    start, end = float(series.times[0]), float(series.times[-1])
    return start, end if end > start else start + 1.0


def warm_up(comparison_only: bool = False) -> None:
    """Draw each chart once (or the comparison's two), small, to nowhere: the first figure of
    a process pays for loading fonts and filling matplotlib's text and path caches (a third of
    drawing a whole trace's charts), which a process drawing aside can do while the engine
    runs."""
    times, one = np.array([0.0, 3600.0]), np.array([1.0, 0.0])
    series = Series(times, one, one[::-1], {"a": one}, {"gpu": one}, 2, one)
    figures = {"starved_time": 1.0, "starved_longest": 1.0, "wait_mean": 1.0}
    if not comparison_only:
        plot_utilisation(series, os.devnull)
        plot_shares(series, {"a": {"gpu": 1.0}}, 2, os.devnull)
    plot_jct_cdf({"a": [1.0, 60.0]}, os.devnull)
    plot_starved({"a": {"per_project": {"a": figures}}}, os.devnull)


# --- JCT CDF -----------------------------------------------------------------------------------


def plot_jct_cdf(jcts: Mapping[str, Sequence[float]], path: str | Path) -> Path:
    """CDF of job completion times, one line per policy, log-scaled time axis."""
    fig = _figure(7.5, 4.8, left=0.75, right=0.25)
    ax = fig.add_subplot()
    drawn = [
        _cdf_line(ax, policy, np.sort(np.asarray(v, float)), i)
        for i, (policy, v) in enumerate(jcts.items())
        if len(v)
    ]
    if not any(drawn):
        ax.text(0.5, 0.5, "no finished jobs", ha="center", va="center", transform=ax.transAxes)
    ax.set_xscale("log")
    _human_ticks(ax, [x for v in jcts.values() if len(v) for x in (min(v), max(v))])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("Job completion time (submit to finish; log scale)")
    ax.set_ylabel("Fraction of finished jobs")
    ax.set_title("Job completion time CDF by policy", y=1.0)
    ax.grid(True, which="major", alpha=0.3)
    if any(drawn):
        ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def _cdf_line(ax, policy: str, values: np.ndarray, i: int) -> bool:
    values = np.maximum(values, 0.1)  # a log axis cannot show 0 s
    n = len(values)
    if n > MAX_POINTS:
        frac = np.linspace(0.0, 1.0, MAX_POINTS)
        xs = np.quantile(values, frac)
    else:  # start at 0 just before the first value, like a CDF
        xs, frac = np.append(values[0], values), np.arange(0, n + 1) / n
    p50, p95 = np.percentile(values, [50, 95])
    label = f"{policy} (n={n}, p50 {fmt_seconds(p50)}, p95 {fmt_seconds(p95)})"
    ax.step(xs, frac, where="post", label=label, color=f"C{i % 10}", linewidth=1.6)
    return True


def _human_ticks(ax, bounds: list[float]) -> None:
    """Round-unit ticks on the log time axis, labelled in s/min/h/d."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if not bounds:
        return
    lo, hi = max(min(bounds), 0.1) / 1.5, max(bounds) * 1.5
    ax.set_xlim(lo, hi)
    ticks = [t for t in _TICKS if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = [t for t in _FINE_TICKS if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_seconds(x).replace(".0 ", " ")))
    ax.xaxis.set_minor_formatter(NullFormatter())


# --- utilisation -------------------------------------------------------------------------------


def plot_utilisation(series: Series, path: str | Path) -> Path:
    """Utilisation (left axis) and queue length (right axis) over time."""
    series = binned(series)
    fig = _figure(9.0, 4.6, left=0.75, right=0.8, bottom=0.95)
    ax = fig.add_subplot()
    start, end = _span(series)
    unit, unit_name = _time_unit(end - start)
    util = series.utilisation * 100.0
    x, y = _steps(series.times, util, end)
    (u_line,) = ax.plot((x - start) / unit, y, drawstyle="steps-post", color="C0", lw=1.2)
    x, q = _steps(series.times, series.queue, end)
    ax2 = ax.twinx()
    (q_line,) = ax2.plot((x - start) / unit, q, drawstyle="steps-post", color="C1", lw=1.0)
    ax.set_ylim(0, max(105.0, float(np.max(util, initial=0.0)) * 1.05))
    ax2.set_ylim(0, max(1.0, float(np.max(q)) * 1.1) if len(q) else 1.0)
    ax.set_xlabel(f"Time since first event ({unit_name})")
    ax.set_ylabel("Utilisation (% of accelerators busy)", color="C0")
    ax2.set_ylabel("Queue length (pending jobs)", color="C1")
    ax.set_title(f"Utilisation and queue length ({series.capacity} accelerators)", y=1.0)
    ax.grid(True, alpha=0.3)
    labels = ["utilisation", "queue length"]
    if series.bin_s is not None:
        labels = [f"{lab} (mean per {fmt_seconds(series.bin_s)})" for lab in labels]
    fig.legend([u_line, q_line], labels, loc="lower center", ncols=2, fontsize="small")
    return _save(fig, path)


# --- shares ------------------------------------------------------------------------------------


def plot_shares(
    series: Series,
    guarantees: Mapping[str, Mapping[str, float]],
    capacity: Mapping[str, int] | int,
    path: str | Path,
) -> Path:
    """Each project's share of the pool over time against its guarantee (dashed).

    One small panel per project, sharing axes, so each line is read against its own
    guarantee: the TOP_PROJECTS biggest users by accelerator-seconds, the rest summed as
    "other". Guarantees are in accelerators (see metrics.guarantees_from_quota).
    """
    total = capacity if isinstance(capacity, int) else sum(capacity.values())
    total = total or 1
    series = binned(series)
    groups = _share_groups(series, guarantees)
    cols = min(3, max(len(groups), 1))
    rows = max(math.ceil(len(groups) / cols), 1)
    height = 2.4 * rows + 1.2
    fig = _figure(4.0 * cols + 0.8, height, top=0.6, bottom=0.85, hspace=0.4, wspace=0.08)
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    start, end = _span(series)
    unit, unit_name = _time_unit(end - start)
    top = 1.0
    for ax, (name, held, guar) in zip(axes, groups, strict=False):
        top = max(top, _share_panel(ax, series.times, name, held, guar, total, start, end, unit))
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    if not groups:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no job held accelerators", ha="center", va="center")
    axes[0].set_ylim(0, min(100.0, top * 1.15) if top > 0 else 100.0)
    if groups:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower right", ncols=2)
    fig.suptitle(f"Share of the pool per project vs guarantee ({total} accelerators)")
    fig.supxlabel(f"Time since first event ({unit_name})", y=0.15 / height, va="bottom")
    fig.supylabel("Share of pool (%)")
    return _save(fig, path)


def _share_groups(series: Series, guarantees) -> list[tuple[str, np.ndarray, float]]:
    """(name, held array, guaranteed accelerators) for the top projects, then "other"."""
    used = {p: series.integral(h) for p, h in series.held.items()}
    ranked = sorted(used, key=lambda p: (-used[p], p))
    top, rest = ranked[:TOP_PROJECTS], ranked[TOP_PROJECTS:]

    def guarantee(p: str) -> float:
        return float(sum(guarantees.get(p, {}).values()))

    groups = [(p, series.held[p], guarantee(p)) for p in top]
    if rest:
        held = np.sum([series.held[p] for p in rest], axis=0)
        others = set(rest) | (set(guarantees) - set(top))
        groups.append((f"other ({len(others)})", held, sum(guarantee(p) for p in others)))
    return groups


def _share_panel(ax, times, name, held, guarantee, total, start, end, unit) -> float:
    """Draw one project's panel; returns the highest share drawn (%), for the common y limit."""
    x, y = _steps(times, held / total * 100.0, end)
    xs = (x - start) / unit
    ax.fill_between(xs, y, step="post", color="C0", alpha=0.35, linewidth=0)
    ax.plot(xs, y, drawstyle="steps-post", color="C0", lw=0.9, label="held")
    g = guarantee / total * 100.0
    ax.axhline(g, color="C3", linestyle="--", lw=1.2, label="guarantee")
    mean = float(np.sum(np.diff(x) * y[:-1]) / (end - start)) if end > start else 0.0
    ax.set_title(f"{name}: mean {mean:.1f} %, guarantee {g:.1f} %", fontsize="small", y=1.0)
    ax.grid(True, alpha=0.3)
    return max(float(np.max(y)) if len(y) else 0.0, g)


# --- per project: starved and waiting ----------------------------------------------------------

TOP_STARVED = 15
# (summary key, panel title) of the per-project figures drawn side by side
_PROJECT_PANELS = (
    ("starved_time", "starved, in all"),
    ("starved_longest", "longest starved spell"),
    ("wait_mean", "mean wait (all time pending)"),
)


def plot_starved(summaries: Mapping[str, Mapping], path: str | Path) -> Path:
    """Per project, one bar per policy: the time it spent starved (pending work, nothing
    running), its longest starved spell and its jobs' mean wait; the projects starved longest
    under any policy, then those that waited longest."""
    figures = {
        policy: {
            p: tuple(v[key] or 0.0 for key, _ in _PROJECT_PANELS)
            for p, v in s["per_project"].items()
        }
        for policy, s in summaries.items()
    }
    worst: dict[str, tuple[float, float]] = {}  # project -> (longest spell, mean wait), worst
    for by in figures.values():
        for project, (_, longest, wait) in by.items():
            was = worst.get(project, (0.0, 0.0))
            worst[project] = (max(was[0], longest), max(was[1], wait))
    ranked = sorted(worst, key=lambda p: (-worst[p][0], -worst[p][1], p))
    projects = [p for p in ranked if worst[p] > (0.0, 0.0)][:TOP_STARVED]
    height = 0.32 * max(len(projects), 3) * max(len(figures), 1) ** 0.5 + 1.6
    fig = _figure(13.0, height, left=1.0, right=0.3, top=0.6, bottom=0.95, wspace=0.08)
    axes = fig.subplots(1, len(_PROJECT_PANELS), sharey=True)
    width = 0.8 / max(len(figures), 1)
    ys = np.arange(len(projects))
    for k, (ax, (_, what)) in enumerate(zip(axes, _PROJECT_PANELS, strict=True)):
        top = max((by.get(p, (0.0,) * 3)[k] for by in figures.values() for p in projects),
                  default=0.0)  # fmt: skip
        unit, unit_name = _time_unit(top)
        for i, (policy, by) in enumerate(figures.items()):
            values = [by.get(p, (0.0,) * 3)[k] / unit for p in projects]
            ax.barh(ys + i * width, values, height=width, color=f"C{i % 10}", label=policy)
        ax.set_title(what, fontsize="small", y=1.0)
        ax.set_xlabel(unit_name)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(ys + width * (len(figures) - 1) / 2, projects)
    axes[0].invert_yaxis()
    if not projects:
        axes[0].text(0.5, 0.5, "no project was starved or waited", ha="center", va="center",
                     transform=axes[0].transAxes)  # fmt: skip
    elif figures:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncols=len(figures))
    fig.suptitle("Per project and policy: pending work and nothing running, and the wait")
    return _save(fig, path)
