"""Metrics on tiny hand-made event logs (values computed by hand in the comments), and plots."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from corral.formats.types import FormatError, Quota
from corral.sim.metrics import (
    JobInfo,
    comparison_table,
    guarantees_from_quota,
    infos_from_jobs,
    job_table,
    read_events,
    resample,
    summarize,
    timeseries,
    write_job_csv,
    write_summary,
)
from corral.sim.plots import BINS, binned, plot_jct_cdf, plot_shares, plot_utilisation
from corral.sim.traces import synthetic

CAPACITY = {"v100": 8}
GUARANTEES = {"p": {"v100": 4.0}, "q": {"v100": 4.0}}


def info(name, project, submit, duration, demand):
    return JobInfo(name, project, project, submit, duration, demand, "v100")


# One 8-GPU pool. a (p, 4 GPUs, needs 100 s), b (q, 4, 50 s), c (q, 4, 30 s), d (p, 16: too big).
INFOS = {
    "a": info("a", "p", 0, 100, 4),
    "b": info("b", "q", 10, 50, 4),
    "c": info("c", "q", 20, 30, 4),
    "d": info("d", "p", 70, 10, 16),
}


def ev(t, event, job, **extra):
    return {"t": t, "event": event, "job": job, "project": INFOS[job].project, **extra}


# a starts at once; b fills the pool at 10; c arrives at 20 and a is preempted for it, c starts
# at 25 (5 s of grace); c finishes at 55 and a resumes (20 s done, 80 to go) until 135; b
# finishes at 60; d is rejected on arrival at 70.
LOG = [
    ev(0, "submit", "a"),
    ev(0, "start", "a", nodes=["n0"]),
    ev(10, "submit", "b"),
    ev(10, "start", "b", nodes=["n0"]),
    ev(20, "submit", "c"),
    ev(20, "preempt", "a", reason="reclaim"),
    ev(25, "start", "c", nodes=["n0"]),
    ev(55, "finish", "c"),
    ev(55, "start", "a", nodes=["n0"]),
    ev(60, "finish", "b"),
    ev(70, "submit", "d"),
    ev(70, "reject", "d", reason="needs 16 v100, the pool has 8"),
    ev(135, "finish", "a"),
]


def test_job_table_by_hand():
    rows = {r.name: r for r in job_table(LOG, INFOS)}
    a, b, c, d = rows["a"], rows["b"], rows["c"], rows["d"]
    # a: submit 0, start 0, preempted 20, resumed 55, finish 135 -> wait 0 + 35 (pending from
    # the preemption to the resume), first wait 0, JCT 135; ran 0-20 and 55-135 = 100 s.
    assert (a.state, a.start, a.finish, a.wait, a.jct, a.run_time, a.preemptions) == (
        "finished", 0, 135, 35, 135, 100, 1
    )  # fmt: skip
    assert a.first_wait == 0
    # b: submit 10, start 10, finish 60 -> wait 0, JCT 50, ran 50 s.
    assert (b.wait, b.jct, b.run_time, b.preemptions) == (0, 50, 50, 0)
    # c: submit 20, start 25, finish 55 -> wait 5, JCT 35, ran 30 s.
    assert (c.wait, c.first_wait, c.jct, c.run_time) == (5, 5, 35, 30)
    # d: rejected at 70, never started.
    assert (d.state, d.start, d.finish, d.end, d.wait, d.jct, d.run_time) == (
        "rejected", None, None, 70, None, None, 0
    )  # fmt: skip


def test_summary_by_hand():
    s = summarize(LOG, INFOS, CAPACITY, GUARANTEES)
    assert (s["jobs"], s["finished"], s["rejected"], s["failed"], s["cancelled"]) == (4, 3, 1, 0, 0)
    assert (s["unfinished"], s["preemptions"]) == (0, 1)
    # JCTs 35, 50, 135: mean 220 / 3; linear percentiles over ranks 0..2:
    # p95 at rank 1.9 = 50 + 0.9 x 85 = 126.5; p99 at rank 1.98 = 50 + 0.98 x 85 = 133.3.
    assert s["jct"]["mean"] == pytest.approx(220 / 3)
    assert s["jct"]["p50"] == 50
    assert s["jct"]["p95"] == pytest.approx(126.5)
    assert s["jct"]["p99"] == pytest.approx(133.3)
    # Waits 35, 0, 5 (d never started): mean 40/3, p95 at rank 1.9 = 5 + 0.9 x 30 = 32.
    assert s["wait"]["mean"] == pytest.approx(40 / 3)
    assert s["wait"]["p50"] == 5 and s["wait"]["p95"] == pytest.approx(32)
    # First waits 0, 0, 5: mean 5/3, p95 at rank 1.9 = 0 + 0.9 x 5 = 4.5.
    assert s["first_wait"]["mean"] == pytest.approx(5 / 3)
    assert s["first_wait"]["p95"] == pytest.approx(4.5)
    assert s["mean_duration"] == pytest.approx((100 + 50 + 30) / 3)
    # Busy GPUs: 0-10: 4, 10-20: 8, 20-25: 4, 25-55: 8, 55-60: 8, 60-135: 4
    # = 40 + 80 + 20 + 240 + 40 + 300 = 720 GPU-s (= a 400 + b 200 + c 120).
    # Makespan 135 - 0 = 135 s, all of it with work; utilisation 720 / (8 x 135) = 2/3.
    assert s["makespan"] == s["work_time"] == 135
    assert s["utilisation_of_makespan"] == pytest.approx(2 / 3)
    assert s["busy_accel_seconds"] == pytest.approx(720)
    assert s["utilisation"] == pytest.approx(2 / 3)
    assert s["utilisation_by_accelerator"] == {"v100": pytest.approx(2 / 3)}
    p, q = s["per_project"]["p"], s["per_project"]["q"]
    # p: a 400 GPU-s -> mean share 400 / 1080; q: b + c = 320 -> 320 / 1080. Guarantee 4/8.
    assert (p["jobs"], p["finished"], p["jct_mean"], p["wait_mean"]) == (2, 1, 135, 35)
    assert p["accel_seconds"] == pytest.approx(400)
    assert p["mean_share"] == pytest.approx(400 / 1080)
    assert p["guarantee_share"] == 0.5
    assert (q["jobs"], q["finished"], q["jct_mean"], q["wait_mean"]) == (2, 2, 42.5, 2.5)
    assert q["mean_share"] == pytest.approx(320 / 1080)
    # p is starved while a waits for its resume (20-55): pending work, nothing running; d's
    # submit and reject at 70 net to nothing. q always has b or c running while c waits.
    assert (p["starved_time"], p["starved_longest"]) == (35, 35)
    assert (q["starved_time"], q["starved_longest"]) == (0, 0)
    assert s["starved_time"] == 35
    assert s["starved_longest"] == {"project": "p", "seconds": 35}


def test_utilisation_counts_only_the_time_with_work():
    # x (4 of 8 GPUs) runs 0-10; nothing is pending or running until y arrives at 100 and runs
    # 100-110. Busy 80 GPU-s; work time 20 s of a 110 s makespan.
    infos = {"x": info("x", "p", 0, 10, 4), "y": info("y", "q", 100, 10, 4)}
    log = [
        {"t": 0, "event": "submit", "job": "x", "project": "p"},
        {"t": 0, "event": "start", "job": "x", "project": "p"},
        {"t": 10, "event": "finish", "job": "x", "project": "p"},
        {"t": 100, "event": "submit", "job": "y", "project": "q"},
        {"t": 100, "event": "start", "job": "y", "project": "q"},
        {"t": 110, "event": "finish", "job": "y", "project": "q"},
    ]
    s = summarize(log, infos, CAPACITY, GUARANTEES)
    assert (s["makespan"], s["work_time"], s["busy_accel_seconds"]) == (110, 20, 80)
    assert s["utilisation"] == pytest.approx(80 / (8 * 20))
    assert s["utilisation_of_makespan"] == pytest.approx(80 / (8 * 110))
    assert s["utilisation_by_accelerator"] == {"v100": pytest.approx(0.5)}


def test_starved_spells_per_project():
    # p's u runs 0-50; p's v waits 10-80 but p is starved only from 50 (u ended) to 80;
    # p's w waits 100-120 with nothing of p running: two spells, 30 and 20 s. q's z is
    # preempted and restarted at 60 (one instant: no spell) and is still pending at the end
    # (its spell 130-150 runs to the log's last event).
    infos = {
        "u": info("u", "p", 0, 50, 4),
        "v": info("v", "p", 10, 10, 4),
        "w": info("w", "p", 100, 10, 4),
        "z": info("z", "q", 0, 500, 4),
        "zz": info("zz", "q", 150, 1, 4),
    }

    def e(t, event, job):
        return {"t": t, "event": event, "job": job, "project": infos[job].project}

    log = [
        e(0, "submit", "u"), e(0, "start", "u"), e(0, "submit", "z"), e(0, "start", "z"),
        e(10, "submit", "v"), e(50, "finish", "u"), e(60, "preempt", "z"), e(60, "start", "z"),
        e(80, "start", "v"), e(90, "finish", "v"), e(100, "submit", "w"), e(120, "start", "w"),
        e(125, "finish", "w"), e(130, "preempt", "z"), e(150, "submit", "zz"),
    ]  # fmt: skip
    s = summarize(log, infos, CAPACITY, GUARANTEES)
    p, q = s["per_project"]["p"], s["per_project"]["q"]
    assert (p["starved_time"], p["starved_longest"]) == (50, 30)
    assert (q["starved_time"], q["starved_longest"]) == (20, 20)
    assert s["starved_longest"] == {"project": "p", "seconds": 30}
    rows = {r.name: r for r in job_table(log, infos)}
    # v waited 10-80; z waited 0 (restarted at once), then 130-150 while the log ran on.
    assert (rows["v"].wait, rows["z"].wait, rows["z"].first_wait) == (70, 20, 0)


def test_timeseries_by_hand():
    s = timeseries(LOG, INFOS, CAPACITY)
    assert s.times.tolist() == [0, 10, 20, 25, 55, 60, 70, 135]
    assert s.busy.tolist() == [4, 8, 4, 8, 8, 4, 4, 0]
    # Queue: c arrives and a is preempted at 20 (2), c starts at 25 (1), a resumes at 55 (0);
    # d is submitted and rejected at 70, which nets to 0 at that instant.
    assert s.queue.tolist() == [0, 0, 2, 1, 0, 0, 0, 0]
    assert s.held["p"].tolist() == [4, 4, 0, 0, 4, 4, 4, 0]
    assert s.held["q"].tolist() == [0, 4, 4, 8, 4, 0, 0, 0]
    assert s.utilisation.tolist() == [0.5, 1, 0.5, 1, 1, 0.5, 0.5, 0]
    assert s.integral(s.busy) == 720
    # Time-weighted means over [0, 20) and [20, 60): 120 / 20 = 6; (20 + 240 + 40) / 40 = 7.5.
    assert resample(s.times, s.busy, np.array([0.0, 20.0, 60.0])).tolist() == [6.0, 7.5]


def test_states_of_unfinished_cancelled_and_failed_jobs():
    infos = {n: info(n, "p", 0, 100, 2) for n in ("run", "wait", "gone", "bad")}
    log = [
        {"t": 0, "event": "submit", "job": n, "project": "p"}
        for n in ("run", "wait", "gone", "bad")
    ] + [
        {"t": 0, "event": "start", "job": "run", "project": "p", "nodes": ["n0"]},
        {"t": 0, "event": "start", "job": "bad", "project": "p", "nodes": ["n0"]},
        {"t": 5, "event": "fail", "job": "bad", "project": "p"},
        {"t": 10, "event": "cancel", "job": "gone", "project": "p"},
        {"t": 40, "event": "submit", "job": "late", "project": "p"},
    ]
    infos["late"] = info("late", "p", 40, 100, 2)
    rows = {r.name: r for r in job_table(log, infos)}
    assert {n: r.state for n, r in rows.items()} == {
        "run": "running", "wait": "pending", "gone": "cancelled", "bad": "failed", "late": "pending"
    }  # fmt: skip
    # A job still running when the log ends has run until the last event (t = 40).
    assert rows["run"].run_time == 40 and rows["bad"].run_time == 5
    s = summarize(log, infos, {"v100": 4}, {})
    assert (s["unfinished"], s["failed"], s["cancelled"], s["finished"]) == (3, 1, 1, 0)
    assert s["jct"] == {"mean": None, "p50": None, "p95": None, "p99": None}
    # No finish: the span runs to the last event (40 s). Busy: run 2 x 40 + bad 2 x 5 = 90.
    assert s["makespan"] == 40 and s["busy_accel_seconds"] == 90
    assert s["utilisation"] == pytest.approx(90 / (4 * 40))
    assert timeseries(log, infos, {"v100": 4}).queue.tolist() == [2, 2, 1, 2]


def test_bad_event_logs_are_format_errors():
    with pytest.raises(FormatError, match="job 'zz' has no JobInfo"):
        job_table([{"t": 0, "event": "submit", "job": "zz"}], INFOS)
    with pytest.raises(FormatError, match="unknown event 'explode'"):
        job_table([{"t": 0, "event": "explode", "job": "a"}], INFOS)
    with pytest.raises(FormatError, match="needs t, event and job"):
        job_table([{"event": "submit", "job": "a"}], INFOS)


def test_out_of_order_log_is_sorted():
    shuffled = LOG[6:] + LOG[:6]
    assert summarize(shuffled, INFOS, CAPACITY, GUARANTEES) == summarize(
        LOG, INFOS, CAPACITY, GUARANTEES
    )


def test_outputs(tmp_path):
    rows = job_table(LOG, INFOS)
    write_job_csv(rows, tmp_path / "jobs.csv")
    with open(tmp_path / "jobs.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["name"] for r in table] == ["a", "b", "c", "d"]
    assert table[0]["jct"] == "135.0" and table[3]["start"] == ""
    summary = summarize(LOG, INFOS, CAPACITY, GUARANTEES)
    write_summary(summary, tmp_path / "summary.json")
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    with open(tmp_path / "events.jsonl", "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in LOG)
    assert read_events(tmp_path / "events.jsonl") == LOG


def test_comparison_table():
    from rich.console import Console

    fast = summarize(LOG, INFOS, CAPACITY, GUARANTEES)
    slow = summarize(LOG[:-1], INFOS, CAPACITY, GUARANTEES)
    console = Console(record=True, width=100)
    console.print(comparison_table({"fair": fast, "fifo": slow}))
    text = console.export_text()
    assert "fair" in text and "fifo" in text
    assert "JCT p95" in text and "66.7 %" in text


def test_infos_and_guarantees_from_scenario_objects():
    jobs = synthetic(jobs=3, rate_per_hour=60, seed=0, projects=["a"], sizes=[(16, 1)])
    infos = infos_from_jobs(jobs)
    assert infos["j0"].demand == 16 and infos["j0"].project == "a" and infos["j0"].submit == 0
    quota = Quota(shares={"a": {"v100": 3}, "b": {"v100": 1}}, total_resources={"v100": 40})
    assert guarantees_from_quota(quota, {"v100": 64}) == {
        "a": {"v100": 30.0},
        "b": {"v100": 10.0},
    }


# --- plots -------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path, min_kb=10):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > min_kb * 1024


def big_log():
    """A synthetic FIFO run long enough (> MAX_POINTS events) to exercise binning."""
    jobs = synthetic(
        jobs=1500, rate_per_hour=40, seed=5, projects=list("abcdefghijk"), sizes="gavel"
    )
    infos = infos_from_jobs(jobs)
    events, free, running, now = [], 64, [], 0.0  # running: (end, name, demand)
    for job in jobs:
        name, need = job.spec.name, infos[job.spec.name].demand
        events.append(
            {"t": job.submit, "event": "submit", "job": name, "project": job.spec.project}
        )
        now = max(now, job.submit)  # FIFO: never start before the job ahead
        while free < need:  # FIFO: wait for the earliest finishes
            running.sort()
            end, done, held = running.pop(0)
            now, free = max(now, end), free + held
            events.append(
                {"t": end, "event": "finish", "job": done, "project": infos[done].project}
            )
        free -= need
        running.append((now + job.duration, name, need))
        events.append({"t": now, "event": "start", "job": name, "project": job.spec.project})
    for end, done, _ in sorted(running):
        events.append({"t": end, "event": "finish", "job": done, "project": infos[done].project})
    return sorted(events, key=lambda e: e["t"]), infos


def test_plots_render(tmp_path):
    events, infos = big_log()
    capacity = {"v100": 64}
    guarantees = {p: {"v100": 64 / 11} for p in "abcdefghijk"}
    series = timeseries(events, infos, capacity)
    assert len(series.times) > 2000 and series.busy.max() <= 64
    jct = [r.jct for r in job_table(events, infos) if r.jct is not None]
    assert_png(plot_jct_cdf({"fifo": jct, "half": [x / 2 for x in jct]}, tmp_path / "jct.png"))
    assert_png(plot_utilisation(series, tmp_path / "util.png"))
    assert_png(plot_shares(series, guarantees, capacity, tmp_path / "shares.png"))


def test_a_long_series_is_sent_to_be_drawn_binned(tmp_path):
    """What a process drawing aside is sent: a thousand points a line, the same picture."""
    import matplotlib.image

    events, infos = big_log()
    capacity = {"v100": 64}
    series = timeseries(events, infos, capacity)
    small = binned(series)
    assert len(small.times) == BINS + 1 < len(series.times)
    assert (small.times[0], small.times[-1]) == (series.times[0], series.times[-1])
    assert small.held.keys() == series.held.keys()
    for whole, part in [
        (series.busy, small.busy),
        *zip(series.held.values(), small.held.values(), strict=True),
    ]:
        assert small.integral(part) == pytest.approx(series.integral(whole))
    for plot in (plot_utilisation, lambda s, path: plot_shares(s, {}, capacity, path)):
        whole, part = plot(series, tmp_path / "whole.png"), plot(small, tmp_path / "part.png")
        assert (matplotlib.image.imread(whole) == matplotlib.image.imread(part)).all()
    short = timeseries(LOG, INFOS, CAPACITY)
    assert binned(short) is short


def test_plots_of_tiny_and_empty_inputs(tmp_path):
    series = timeseries(LOG, INFOS, CAPACITY)
    assert_png(plot_jct_cdf({"fair": [35, 50, 135], "none": []}, tmp_path / "a.png"), 5)
    assert_png(plot_jct_cdf({}, tmp_path / "b.png"), 5)
    assert_png(plot_utilisation(series, tmp_path / "c.png"), 5)
    assert_png(plot_shares(series, GUARANTEES, 8, tmp_path / "sub" / "d.png"), 5)
    empty = timeseries([], {}, CAPACITY)
    assert_png(plot_utilisation(empty, tmp_path / "e.png"), 5)
    assert_png(plot_shares(empty, {}, CAPACITY, tmp_path / "f.png"), 5)
