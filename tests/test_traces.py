"""Trace loaders, filters, derived quotas and the synthetic generator."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from corral.formats.types import FormatError
from corral.sim.traces import (
    derive_quota,
    first,
    load_helios_csv,
    load_philly_csv,
    load_philly_json,
    load_trace,
    only_projects,
    sniff_format,
    synthetic,
    window,
)
from corral.sim.traces.common import split_gpus

FIXTURES = Path(__file__).parent / "fixtures"
PHILLY = Path(__file__).resolve().parents[2] / "shared/traces/philly/philly.csv"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def shape(job) -> tuple[int, int]:
    return job.spec.resources.per_worker, job.spec.resources.workers


# --- Philly CSV ------------------------------------------------------------------------------


def test_philly_csv_small():
    load = load_philly_csv(FIXTURES / "philly_small.csv")
    jobs = load.jobs
    # Sorted by submit, ties by row order; rebased so the first (06:13:03) submits at 0.
    assert [j.spec.name for j in jobs] == ["j1", "j2", "j0", "j3", "j4"]
    # 07:01:55 - 06:13:03 = 48 min 52 s; 08:00:00 - 06:13:03 = 1 h 46 min 57 s.
    assert [j.submit for j in jobs] == [0.0, 0.0, 2932.0, 6417.0, 86400.0]
    assert load.origin == datetime(2017, 10, 9, 6, 13, 3)
    assert load.skipped == 0
    by_name = {j.spec.name: j for j in jobs}
    assert shape(by_name["j1"]) == (8, 4)  # 32 GPUs on 8-GPU nodes
    assert shape(by_name["j2"]) == (3, 1)  # 3 GPUs fit on one node
    assert shape(by_name["j3"]) == (6, 2)  # 12 GPUs: 2 x 6, demand kept exact
    assert shape(by_name["j4"]) == (8, 1)  # "8.0" read as 8
    assert by_name["j2"].duration == 1.0  # a duration of 0 becomes 1 s
    assert by_name["j3"].spec.project == "b436b2"  # lowercased
    for j in jobs:
        assert j.user == j.spec.project  # Philly has no users
        assert j.spec.command == ""
        assert j.spec.resources.accelerator == "v100"
        assert DNS_LABEL.fullmatch(j.spec.name) and DNS_LABEL.fullmatch(j.spec.project)


def test_philly_csv_accelerator_and_node_size():
    jobs = load_philly_csv(FIXTURES / "philly_small.csv", accelerator="a100", gpus_per_node=4).jobs
    by_name = {j.spec.name: j for j in jobs}
    assert shape(by_name["j1"]) == (4, 8)
    assert shape(by_name["j4"]) == (4, 2)
    assert {j.spec.resources.accelerator for j in jobs} == {"a100"}


def test_philly_csv_bad_row_names_file_and_line():
    with pytest.raises(FormatError) as err:
        load_philly_csv(FIXTURES / "philly_bad.csv")
    assert str(err.value) == "philly_bad.csv:3: num_gpus: must be a positive integer, got 'x'"


def test_philly_csv_skip_bad_counts_rows():
    load = load_philly_csv(FIXTURES / "philly_bad.csv", skip_bad=True)
    # Lines 3 (num_gpus x), 4 (duration -5) and 5 (month 13) are skipped.
    assert load.skipped == 3
    assert load.skip_reasons == {"bad-row": 3}
    assert [j.spec.name for j in load.jobs] == ["j0", "j4"]
    assert [j.submit for j in load.jobs] == [0.0, 185.0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,-5,1,1,a\n",
         "t.csv:2: duration: must be a number of seconds >= 0, got '-5'"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,5,0,1,a\n",
         "t.csv:2: num_gpus: must be a positive integer, got '0'"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\nyesterday,5,1,1,a\n",
         "t.csv:2: timestamp: must be a time 'YYYY-MM-DD HH:MM:SS', got 'yesterday'"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,5,1,1,!!\n",
         "t.csv:2: team: cannot be made a project name, got '!!'"),
        ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,5\n",
         "t.csv:2: row: expected at least 5 columns, got 2"),
        ("timestamp,duration,gpus\n", "t.csv:1: header: missing column(s) num_gpus, cluster"),
        ("", "t.csv:1: empty file, expected a CSV header"),
    ],
)  # fmt: skip
def test_philly_csv_errors_are_one_line(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(FormatError) as err:
        load_philly_csv(path)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_unreadable_bytes_are_a_format_error(tmp_path):
    path = tmp_path / "bin.csv"
    path.write_bytes(b"timestamp,duration,num_gpus,gpu_time,cluster\n\xff\xfe,1,1,1,a\n")
    with pytest.raises(FormatError) as err:
        load_philly_csv(path)
    assert str(err.value) == "bin.csv:2: not UTF-8 text (byte 0xff at offset 45)"
    path = tmp_path / "bin.json"
    path.write_bytes(b'[{"vc": "\xff"}]')
    with pytest.raises(FormatError, match=r"^bin.json:1: not UTF-8 text"):
        load_philly_json(path)


def test_missing_file_is_a_format_error(tmp_path):
    with pytest.raises(FormatError, match="cannot read trace"):
        load_philly_csv(tmp_path / "absent.csv")
    with pytest.raises(FormatError, match="cannot read trace"):
        load_trace(tmp_path / "absent.csv")


@pytest.mark.skipif(not PHILLY.exists(), reason=f"the Philly trace is not at {PHILLY}")
def test_real_philly_trace_loads_fully_and_fast():
    started = time.perf_counter()
    load = load_philly_csv(PHILLY)
    elapsed = time.perf_counter() - started
    jobs = load.jobs
    assert len(jobs) == 82_247
    assert load.skipped == 0
    assert len({j.spec.project for j in jobs}) == 15
    assert len({j.spec.name for j in jobs}) == 82_247
    assert jobs[0].submit == 0.0
    assert all(a.submit <= b.submit for a, b in zip(jobs, jobs[1:], strict=False))
    assert load.origin is not None and load.origin.date().isoformat() == "2017-09-04"
    # GPU demand is kept exactly: 12- and 24-GPU jobs split evenly over 8-GPU nodes.
    total = sum(j.spec.resources.total * j.duration for j in jobs)
    assert total == pytest.approx(sum(g * d for g, d in _philly_gpu_seconds()), rel=1e-12)
    assert elapsed < 10.0  # about 0.8 s on one idle core; generous for a loaded CI box


def _row_at_a_time(path, **kw):
    """The Philly table as the loader reads it when the column-wise parse declines it."""
    from corral.sim.traces import philly
    from corral.sim.traces.common import load_csv

    kw = {"accelerator": "v100", "gpus_per_node": 8, "skip_bad": False, **kw}
    return load_csv(path, philly.COLUMNS, philly._rows, **kw)


@pytest.mark.skipif(not PHILLY.exists(), reason=f"the Philly trace is not at {PHILLY}")
def test_real_philly_trace_column_wise_is_row_at_a_time():
    """The column-wise parse makes the very jobs (names, order, times, shapes) and origin."""
    assert load_philly_csv(PHILLY) == _row_at_a_time(PHILLY)


HEADER = "timestamp,duration,num_gpus,gpu_time,cluster,extra\n"


@pytest.mark.parametrize(
    "body",
    [
        # ties on the submit second keep the file's order; blank lines are skipped; zero and
        # negative-zero durations take 1 s; counts and numbers as float() and int() read them
        "2017-10-09 07:01:55,5,1,1,A b\n\n2017-10-09 07:01:55,0,16,1,a_b,x\n"
        "2017-10-08 23:59:59,-0,2,1,c\n2016-02-29 00:00:00, 1e3 ,+8,1,c\n",
        # what only the row-at-a-time parse takes: counts written as floats, time zones,
        # fractions of a second, ISO 'T'
        "2017-10-09 07:01:55,5,8.0,1,a\n2017-10-09 07:01:56,5,1,1,a\n",
        "2017-10-09 07:01:55+02:00,5,1,1,a\n2017-10-09 07:01:56,5,1,1,a\n",
        "2017-10-09 07:01:55.5,5,1,1,a\n2017-10-09T07:01:56,5,1,1,a\n",
    ],
)  # fmt: skip
def test_philly_csv_column_wise_is_row_at_a_time(tmp_path, body):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + body)
    assert load_philly_csv(path) == _row_at_a_time(path)


@pytest.mark.parametrize(
    "row, message",
    [
        ("2017-02-29 00:00:00,5,1,1,a", "timestamp: must be a time 'YYYY-MM-DD HH:MM:SS', got "),
        ("2017-10-09 24:00:00,5,1,1,a", "timestamp: must be a time"),
        ("0000-01-01 00:00:00,5,1,1,a", "timestamp: must be a time"),
        ("2017-10-09 07:01:55,nan,1,1,a", "duration: must be a number of seconds >= 0, got 'nan'"),
        ("2017-10-09 07:01:55,inf,1,1,a", "duration: must be a number of seconds >= 0, got 'inf'"),
        ("2017-10-09 07:01:55,5,-2,1,a", "num_gpus: must be a positive integer, got '-2'"),
        ("2017-10-09 07:01:55,5,1.5,1,a", "num_gpus: must be a positive integer, got '1.5'"),
    ],
)  # fmt: skip
def test_philly_csv_bad_row_among_good_ones_is_named(tmp_path, row, message):
    """A bad row anywhere in a table the column-wise parse would take gives the one line of
    the row-at-a-time parse, with its line number; with skip_bad it alone is left out."""
    good = "2017-10-09 07:01:55,5,1,1,a\n"
    path = tmp_path / "t.csv"
    path.write_text(HEADER + good * 3 + row + "\n" + good)
    with pytest.raises(FormatError) as err:
        load_philly_csv(path)
    assert str(err.value).startswith(f"t.csv:5: {message}")
    load = load_philly_csv(path, skip_bad=True)
    assert len(load.jobs) == 4 and load.skip_reasons == {"bad-row": 1}


def _philly_gpu_seconds():
    import csv

    with open(PHILLY, newline="") as f:
        for row in csv.DictReader(f):
            if row["num_gpus"]:
                yield int(row["num_gpus"]), max(float(row["duration"]), 1.0)


# --- Philly JSON ---------------------------------------------------------------------------------


def test_philly_json_bad_job_names_its_line():
    with pytest.raises(FormatError) as err:
        load_philly_json(FIXTURES / "cluster_job_log_small.json")
    # The second job (no attempts) starts on line 16 of the file.
    assert str(err.value) == (
        "cluster_job_log_small.json:16: attempts: no finished attempt "
        "(one with start_time and end_time)"
    )


def test_philly_json_skip_bad():
    load = load_philly_json(FIXTURES / "cluster_job_log_small.json", skip_bad=True)
    assert load.skipped == 1
    jobs = load.jobs
    assert [j.spec.name for j in jobs] == ["j2", "j0", "j3"]
    # Submits 02:29:00, 02:33:51, 02:45:00.
    assert [j.submit for j in jobs] == [0.0, 291.0, 960.0]
    j2, j0, j3 = jobs
    assert (j2.spec.project, j2.user, shape(j2), j2.duration) == ("6214e9", "7d3a1f", (8, 2), 3600)
    assert (j0.spec.project, j0.user, shape(j0), j0.duration) == ("ee9e8c", "bc1b12", (2, 1), 31)
    assert (j3.user, shape(j3), j3.duration) == ("6214e9", (1, 1), 1.0)  # no user; 0 s -> 1 s


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": 1}', "t.json:1: expected a JSON list of jobs"),
        ("[\n  {\"vc\": 1}\n]", "t.json:2: vc: must be a non-empty string, got 1"),
        ("[\n  {}, \n  3\n]", "t.json:2: vc: must be a non-empty string, got None"),
        ("[\n  {\"vc\": \"a\",", "t.json:2: invalid JSON"),
        ("[\n  {\"vc\": \"a\", \"submitted_time\": null}]",
         "t.json:2: submitted_time: must be a time 'YYYY-MM-DD HH:MM:SS', got None"),
    ],
)  # fmt: skip
def test_philly_json_errors(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(FormatError) as err:
        load_philly_json(path)
    assert str(err.value).startswith(message)


# --- Helios ------------------------------------------------------------------------------------


def test_helios_epoch_seconds_and_cpu_jobs():
    load = load_helios_csv(FIXTURES / "helios_small.csv")
    assert load.skipped == 1 and load.skip_reasons == {"cpu-only": 1}
    assert load.origin == datetime(2020, 5, 1, 0, 0, 0)  # epoch 1588291200, as naive UTC
    jobs = load.jobs
    assert [j.spec.name for j in jobs] == ["j0", "j2", "j3"]
    assert [j.submit for j in jobs] == [0.0, 30.0, 100.0]
    assert [j.spec.project for j in jobs] == ["vc6ye", "vchvq", "vchvq"]
    assert [j.user for j in jobs] == ["uAbc", "uXyz", "uXyz"]
    assert [shape(j) for j in jobs] == [(8, 1), (8, 2), (1, 1)]
    assert jobs[2].duration == 1.0


def test_helios_datetime_and_bad_rows():
    path = FIXTURES / "helios_datetime.csv"
    with pytest.raises(FormatError) as err:
        load_helios_csv(path)
    assert str(err.value) == "helios_datetime.csv:4: gpu_num: must be an integer >= 0, got 'two'"
    load = load_helios_csv(path, skip_bad=True)
    assert load.skipped == 2 and load.skip_reasons == {"bad-row": 1, "cpu-only": 1}
    assert [(j.spec.name, j.user, j.submit) for j in load.jobs] == [
        ("j1", "bob", 0.0),
        ("j0", "alice", 10.0),
    ]


# --- load_trace --------------------------------------------------------------------------------


def test_load_trace_sniffs_the_format():
    assert sniff_format(FIXTURES / "philly_small.csv") == "philly"
    assert sniff_format(FIXTURES / "helios_small.csv") == "helios"
    assert sniff_format(FIXTURES / "cluster_job_log_small.json") == "philly-json"
    assert len(load_trace(FIXTURES / "philly_small.csv").jobs) == 5
    assert len(load_trace(FIXTURES / "helios_small.csv", accelerator="a100").jobs) == 3
    assert len(load_trace(FIXTURES / "cluster_job_log_small.json", skip_bad=True).jobs) == 3
    # An explicit format wins over sniffing.
    with pytest.raises(FormatError, match="header: missing column"):
        load_trace(FIXTURES / "philly_small.csv", fmt="helios")


def test_load_trace_unknown_format(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(FormatError, match="cannot tell the trace format"):
        load_trace(path)
    with pytest.raises(FormatError, match="must be one of philly, philly-json, helios"):
        load_trace(path, fmt="alibaba")


def test_split_gpus():
    assert split_gpus(1, 8) == (1, 1)
    assert split_gpus(8, 8) == (8, 1)
    assert split_gpus(32, 8) == (8, 4)
    assert split_gpus(12, 8) == (6, 2)
    assert split_gpus(17, 8) == (6, 3)  # no even split: rounds up to 18


# --- filters and quotas --------------------------------------------------------------------------


def test_filters_rebase():
    jobs = load_philly_csv(FIXTURES / "philly_small.csv").jobs
    cut = window(jobs, 1000, 10000)  # keeps j0 (2932) and j3 (6417)
    assert [(j.spec.name, j.submit) for j in cut] == [("j0", 0.0), ("j3", 3485.0)]
    assert [j.spec.name for j in first(jobs, 3)] == ["j1", "j2", "j0"]
    assert first(jobs, 0) == []
    only = only_projects(jobs, ["11cb48"])
    assert [(j.spec.name, j.submit) for j in only] == [("j0", 0.0), ("j4", 83468.0)]
    assert window(jobs, 10**7, 10**8) == []


def test_derive_quota_equal_and_demand():
    jobs = load_helios_csv(FIXTURES / "helios_small.csv").jobs
    equal = derive_quota(jobs, "v100")
    assert equal.shares == {"vc6ye": {"v100": 1.0}, "vchvq": {"v100": 1.0}}
    assert equal.is_member("uAbc", "vc6ye") and not equal.is_member("uAbc", "vchvq")
    assert equal.projects_of("uXyz") == ["vchvq"]
    # GPU-seconds: vc6ye 8 x 3600 = 28800; vchvq 16 x 600 + 1 x 1 = 9601.
    demand = derive_quota(jobs, "v100", how="demand").fractions("v100")
    assert demand["vc6ye"] == pytest.approx(28800 / 38401)
    assert demand["vchvq"] == pytest.approx(9601 / 38401)
    with pytest.raises(FormatError, match="shares: must be one of equal, demand"):
        derive_quota(jobs, "v100", how="fair")


def test_derive_quota_escapes_user_names():
    jobs = synthetic(jobs=3, rate_per_hour=60, seed=0, projects=["a"])
    jobs = [type(j)(j.spec, "dot.user+1", j.submit, j.duration) for j in jobs]
    quota = derive_quota(jobs, "v100")
    assert quota.is_member("dot.user+1", "a")
    assert not quota.is_member("dotXuser1", "a")


# --- synthetic ---------------------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed():
    kw = dict(jobs=200, rate_per_hour=30, projects=["vision", "nlp"], sizes="gavel")
    a, b, c = synthetic(seed=7, **kw), synthetic(seed=7, **kw), synthetic(seed=8, **kw)
    assert a == b
    assert a != c
    assert a[0].submit == 0.0
    assert [j.spec.name for j in a] == [f"j{i}" for i in range(200)]
    assert {j.spec.project for j in a} == {"vision", "nlp"}


def test_synthetic_gavel_distributions():
    jobs = synthetic(jobs=20_000, rate_per_hour=60, seed=1, projects=["p"], sizes="gavel")
    durations = np.array([j.duration for j in jobs])
    # 80 % in 60 x 10^[1.5, 3] s = [1897.4, 60000]; 20 % in 60 x 10^[3, 4] s = [60000, 600000].
    assert durations.min() >= 60 * 10**1.5 and durations.max() <= 60 * 10**4
    long = (durations > 60_000).mean()
    assert long == pytest.approx(0.2, abs=0.015)
    # Within each part the exponent is uniform: its median is the middle of the range.
    assert np.median(np.log10(durations[durations <= 60_000] / 60)) == pytest.approx(2.25, abs=0.03)
    assert np.median(np.log10(durations[durations > 60_000] / 60)) == pytest.approx(3.5, abs=0.03)
    sizes = np.array([j.spec.resources.total for j in jobs])
    for gpus, share in {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}.items():
        assert (sizes == gpus).mean() == pytest.approx(share, abs=0.015)
    # Poisson arrivals at 60 per hour: mean gap 60 s.
    gaps = np.diff([j.submit for j in jobs])
    assert gaps.mean() == pytest.approx(60.0, rel=0.03)


def test_synthetic_other_distributions():
    philly = synthetic(jobs=5000, rate_per_hour=100, seed=2, projects=["a"], durations="philly")
    d = np.array([j.duration for j in philly])
    assert np.median(d) == pytest.approx(1144, rel=0.15)  # the real trace's median
    assert (np.array([j.spec.resources.total for j in philly]) == 1).mean() > 0.9
    custom = synthetic(
        jobs=500, rate_per_hour=10, seed=3, projects=["a"], sizes=[(16, 1.0)], durations="exp:100"
    )
    assert {shape(j) for j in custom} == {(8, 2)}
    assert np.mean([j.duration for j in custom]) == pytest.approx(100, rel=0.15)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(durations="weibull"), "durations: must be gavel, philly or exp:MEAN"),
        (dict(durations="exp:-3"), "durations: exp:MEAN needs a mean > 0"),
        (dict(sizes="huge"), "sizes: must be philly, gavel"),
        (dict(sizes=[(0, 1.0)]), "sizes: need gpus >= 1"),
        (dict(projects=[]), "projects: must be a non-empty list"),
        (dict(rate_per_hour=0), "rate_per_hour: must be > 0"),
    ],
)
def test_synthetic_rejects_bad_arguments(kw, message):
    args = dict(jobs=5, rate_per_hour=10, seed=0, projects=["a"]) | kw
    with pytest.raises(FormatError, match=re.escape(message)):
        synthetic(**args)
