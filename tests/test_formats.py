"""Parsers of the user-facing files (DESIGN.md §2): good input parses, bad input says why."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from corral.formats import (
    FormatError,
    Node,
    default_quota,
    load_cluster,
    load_jobspec,
    load_quota,
    load_scenario,
    parse_cluster,
    parse_cluster_shorthand,
    parse_duration,
    parse_jobspec,
    parse_quota,
    parse_scenario,
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def error_of(fn, *args) -> str:
    """The message of the FormatError that fn(*args) raises; it must be one line."""
    with pytest.raises(FormatError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("72h", 259200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("1h 30m", 5400.0),
        ("0s", 0.0),
    ],
)
def test_duration_forms(value, seconds):
    assert parse_duration(value, "max_runtime") == seconds


@pytest.mark.parametrize("value", ["-5m", -1, "soon", "5 minutes", "", "1x", True, None, [1]])
def test_bad_duration_names_key_and_forms(value):
    message = error_of(parse_duration, value, "preempt_grace")
    assert message.startswith("preempt_grace: ")
    assert "30s, 5m, 72h" in message


# --- job specs ---------------------------------------------------------------------------------

JOB_YAML = """
name: llama-sft
project: vision
priority: 0
command: python train.py --lr 3e-4
env: {WANDB_MODE: offline, SEED: 7}
resources:
  accelerator: h100
  per_worker: 8
  workers: 2
  slices: 1
  exclusive: false
max_restarts: 0
preemptible: true
max_runtime: 72h
kind: batch
"""


def good_job(**changes) -> dict:
    job = {"name": "j1", "project": "p", "resources": {"accelerator": "h100", "per_worker": 8}}
    return {**job, **changes}


def test_jobspec_yaml_file(tmp_path):
    spec = load_jobspec(write(tmp_path, "job.yaml", JOB_YAML))
    assert (spec.name, spec.project, spec.priority, spec.kind) == (
        "llama-sft",
        "vision",
        0,
        "batch",
    )
    assert spec.command == "python train.py --lr 3e-4"
    assert spec.env == {"WANDB_MODE": "offline", "SEED": "7"}
    assert spec.resources.total == 16 and spec.resources.gang == 2
    assert spec.max_runtime == 72 * 3600
    assert spec.preemptible is True and spec.max_restarts == 0


def test_jobspec_json_file_with_tabs(tmp_path):
    text = '{\n\t"name": "j1", "project": "p", "command": ["python", "-c", "pass"],\n'
    text += '\t"resources": {"accelerator": "v100", "per_worker": 1}, "priority": "high"}\n'
    spec = load_jobspec(write(tmp_path, "job.json", text))
    assert spec.command == ("python", "-c", "pass")
    assert spec.priority == "high"  # a class name, resolved against the quota later
    assert spec.resources.workers == 1 and spec.resources.slices == 1
    assert spec.max_runtime is None and spec.env == {}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"name": "Bad_Name"}, "name: must be a DNS-1123 label"),
        ({"name": "x" * 64}, "at most 63 characters"),
        ({"name": "-lead"}, "name: must be a DNS-1123 label"),
        ({"project": ""}, "project: must not be empty"),
        ({"gpus": 8}, "gpus: unknown key (allowed: name, project, resources"),
        (
            {"resources": {"accelerator": "h100", "per_worker": 0}},
            "per_worker: must be >= 1, got 0",
        ),
        ({"resources": {"accelerator": "h100", "per_worker": 8, "workers": -2}}, "workers: must"),
        ({"resources": {"accelerator": "h100", "per_worker": "8"}}, "must be an integer, got"),
        (
            {"resources": {"accelerator": "h100", "per_worker": 1, "gpu": 1}},
            "resources.gpu: unknown",
        ),
        ({"max_restarts": -1}, "max_restarts: must be >= 0"),
        ({"max_runtime": "0s"}, "max_runtime: must be a duration > 0"),
        ({"max_runtime": "forever"}, "max_runtime: must be a duration > 0"),
        ({"kind": "service"}, "kind: must be 'batch' or 'interactive'"),
        ({"priority": 1.5}, "priority: must be an integer or a priority class name"),
        ({"command": ["python", 3]}, "command: must be a string (run by /bin/sh -c) or a list"),
        ({"env": {"DEBUG": False}}, "env: DEBUG must be a string or a number (quote it"),
        ({"preemptible": "no"}, "preemptible: must be true or false"),
    ],
)
def test_bad_jobspec(changes, expected):
    message = error_of(parse_jobspec, good_job(**changes), "job.yaml")
    assert message.startswith("job.yaml: ")
    assert expected in message


def test_jobspec_missing_fields_counts_the_rest():
    assert error_of(parse_jobspec, {}) == "job spec: name: required (and 2 more errors)"


def test_jobspec_error_carries_line(tmp_path):
    path = write(tmp_path, "job.yaml", JOB_YAML.replace("per_worker: 8", "per_worker: 0"))
    assert error_of(load_jobspec, path).startswith(f"{path}:8: resources.per_worker: must be >= 1")


def test_malformed_yaml_names_line(tmp_path):
    path = write(tmp_path, "job.yaml", "name: j1\nproject: p\n  resources: 1\n")
    assert error_of(load_jobspec, path).startswith(f"{path}:3:")
    assert "invalid YAML" in error_of(load_jobspec, path)


def test_duplicate_yaml_key_refused(tmp_path):
    path = write(tmp_path, "job.yaml", JOB_YAML + "name: other\n")
    assert 'duplicate key "name" (first on line 1)' in error_of(load_jobspec, path)


def test_empty_or_missing_jobspec(tmp_path):
    assert "is empty" in error_of(load_jobspec, write(tmp_path, "job.yaml", ""))
    assert "cannot read" in error_of(load_jobspec, tmp_path / "nope.yaml")
    assert "must be a mapping" in error_of(load_jobspec, write(tmp_path, "l.yaml", "- 1\n"))


# --- cluster -----------------------------------------------------------------------------------


def test_cluster_ranges_expand_with_padding(tmp_path):
    path = write(
        tmp_path,
        "cluster.yaml",
        """
        - {name: "pool1-{0..1}", accelerator: v5e, count: 4, domain: pool1}
        - {name: "gpu{00..15}", accelerator: h100, count: 8}
        - {name: "r{1..2}n{08..10}", accelerator: a100, count: 4, domain: rack}
        """,
    )
    nodes = load_cluster(path)
    assert nodes[:2] == (Node("pool1-0", "v5e", 4, "pool1"), Node("pool1-1", "v5e", 4, "pool1"))
    gpus = [n.name for n in nodes if n.accelerator == "h100"]
    assert gpus == [f"gpu{i:02d}" for i in range(16)]
    assert all(n.domain == "" for n in nodes if n.accelerator == "h100")
    racks = [n.name for n in nodes if n.accelerator == "a100"]
    assert racks == ["r1n08", "r1n09", "r1n10", "r2n08", "r2n09", "r2n10"]


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([{"name": "n{0..2}", "accelerator": "a", "count": 1}] * 2, "[1].name: node n0 is already"),
        ([{"name": "n", "accelerator": "a", "count": 0}], "[0].count: must be >= 1, got 0"),
        ([{"name": "n", "accelerator": "a", "count": -8}], "[0].count: must be >= 1"),
        ([{"name": "n{3..1}", "accelerator": "a", "count": 1}], "range {3..1} must not go down"),
        ([{"name": "n{a..b}", "accelerator": "a", "count": 1}], "ranges are written {a..b}"),
        ([{"name": "n", "accelerator": "a", "count": 1, "gpus": 2}], "[0].gpus: unknown key"),
        ([], "must list at least one node group"),
    ],
)
def test_bad_cluster(groups, expected):
    assert expected in error_of(parse_cluster, groups, "cluster.yaml")


def test_cluster_duplicate_names_in_file_have_line(tmp_path):
    path = write(
        tmp_path,
        "cluster.yaml",
        """
        - {name: "n{0..3}", accelerator: v100, count: 8}
        - {name: n2, accelerator: v100, count: 8}
        """,
    )
    message = error_of(load_cluster, path)
    assert (
        message
        == f"{path}:2: [1].name: node n2 is already defined by [0]; node names must be unique"
    )


def test_shorthand():
    nodes = parse_cluster_shorthand("64x8:v100,16x4:a100")
    assert len(nodes) == 80
    assert nodes[0] == Node("v100-0", "v100", 8, "") and nodes[63].name == "v100-63"
    assert nodes[64] == Node("a100-0", "a100", 4, "")


def test_shorthand_domains():
    nodes = parse_cluster_shorthand("1000x8:h100@4")
    assert [n.domain for n in nodes[:5]] == ["h100-d0"] * 4 + ["h100-d1"]
    assert nodes[-1].domain == "h100-d249"
    assert len({n.domain for n in nodes}) == 250


def test_shorthand_same_type_twice_keeps_names_unique():
    nodes = parse_cluster_shorthand("2x8:v100@2, 2x8:v100@2")
    assert [n.name for n in nodes] == ["v100-0", "v100-1", "v100-2", "v100-3"]
    assert [n.domain for n in nodes] == ["v100-d0", "v100-d0", "v100-d1", "v100-d1"]


@pytest.mark.parametrize("text", ["", "64x8", "64:v100", "0x8:v100", "4x0:v100", "4x8:v100@0", "x"])
def test_bad_shorthand(text):
    assert "expected COUNTxPER_NODE:TYPE[@DOMAIN_SIZE]" in error_of(parse_cluster_shorthand, text)


# --- quota -------------------------------------------------------------------------------------

QUOTA = """
[toml-schema]
version = "1"
[total_resources]
v4 = 1024
[project_membership]
project1 = ["user1", "user2"]
project2 = ["user1", "user3", "bot-.*"]
[project_resources.project1]
v4 = 0.6
[project_resources.project2]
v4 = 0.4
[project_limits.project2]
v4 = 800
[priority_classes]
low = -100
normal = 0
high = 100
[admins]
users = ["ops"]
[scheduler]
policy = "fair"
placement = "spread"
preempt_grace = "30s"
preempt_min_runtime = "5m"
[scheduler.options]
decay = 0.5
name = "x"
on = true
thresholds = [1, 2.5]
"""


def test_quota_file(tmp_path):
    quota = load_quota(write(tmp_path, "quota.toml", QUOTA))
    assert quota.shares == {"project1": {"v4": 0.6}, "project2": {"v4": 0.4}}
    assert quota.total_resources == {"v4": 1024}
    assert quota.limits == {"project2": {"v4": 800}}
    assert quota.priority_classes == {"low": -100, "normal": 0, "high": 100}
    assert quota.admins == ("ops",)
    assert quota.scheduler.placement == "spread"
    assert quota.scheduler.preempt_grace == 30.0 and quota.scheduler.preempt_min_runtime == 300.0
    assert quota.scheduler.options == {
        "decay": 0.5,
        "name": "x",
        "on": True,
        "thresholds": [1, 2.5],
    }
    assert quota.fractions("v4") == pytest.approx({"project1": 0.6, "project2": 0.4})


def test_quota_membership_is_regex_fullmatch():
    quota = parse_quota(QUOTA, "quota.toml")
    assert quota.is_member("user1", "project1")
    assert not quota.is_member("user10", "project1")  # fullmatch, not search
    assert quota.is_member("bot-7", "project2") and not quota.is_member("xbot-7", "project2")
    assert quota.projects_of("user1") == ["project1", "project2"]


def test_quota_tiers_are_summed():
    text = QUOTA.replace("[total_resources]\nv4 = 1024", "")
    text += "[[total_resources]]\nv4 = 512\nh100 = 8\n[[total_resources]]\nv4 = 256\n"
    assert parse_quota(text, "q.toml").total_resources == {"v4": 768, "h100": 8}


def test_quota_minimal_bastion_file():
    quota = parse_quota('[toml-schema]\nversion = "1"\n', "q.toml")
    assert quota.total_resources is None and quota.shares == {} and quota.membership == {}
    assert quota.scheduler.policy == "fair"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'version = "1"',
            'version = "2"',
            'q.toml:2: toml-schema.version: unsupported version; only "1"',
        ),
        ('version = "1"', "version = 1", "q.toml:2: toml-schema.version: unsupported version"),
        ('[toml-schema]\nversion = "1"\n', "", "q.toml: toml-schema: required: add [toml-schema]"),
        (
            "v4 = 0.4",
            'v4 = "lots"',
            'q.toml:11: project_resources.project2.v4: share must be a number >= 0, got "lots"',
        ),
        (
            "v4 = 0.4",
            "v4 = -0.4",
            "q.toml:11: project_resources.project2.v4: share must be a number >= 0",
        ),
        (
            'project2 = ["user1", "user3", "bot-.*"]',
            "",
            "q.toml:10: project_resources.project2: project project2 has no entry",
        ),
        (
            "[admins]",
            "[admin]",
            "q.toml:18: admin: unknown key (allowed: toml-schema, total_resources",
        ),
        (
            'policy = "fair"',
            'policy = "fair"\npolicyy = "x"',
            "q.toml:22: scheduler.policyy: unknown key (allowed: policy",
        ),
        (
            'placement = "spread"',
            'placement = "random"',
            "q.toml:22: scheduler.placement: must be 'pack' or 'spread'",
        ),
        (
            'preempt_grace = "30s"',
            'preempt_grace = "a bit"',
            "q.toml:23: scheduler.preempt_grace: must be a duration",
        ),
        ("v4 = 800", "v4 = -1", "q.toml:13: project_limits.project2.v4: must be >= 0, got -1"),
        ("v4 = 1024", "v4 = 0.5", "q.toml:4: total_resources.v4: must be a whole number >= 0"),
        (
            '"user2"',
            '"us(er2"',
            "q.toml:6: project_membership.project1[1]: not a valid regular expression",
        ),
        ("low = -100", 'low = "lowest"', "q.toml:15: priority_classes.low: must be an integer"),
        (
            "thresholds = [1, 2.5]",
            'thresholds = [1, "x"]',
            "q.toml:29: scheduler.options.thresholds: must be a number, string, boolean",
        ),
        ('users = ["ops"]', 'users = "ops"', "q.toml:19: admins.users: must be a list"),
        (
            'project1 = ["user1", "user2"]',
            'project1 = "user1"',
            "q.toml:6: project_membership.project1: must be a list of user-id regexes",
        ),
    ],
)
def test_bad_quota(old, new, expected):
    text = QUOTA.lstrip("\n")
    assert old in text
    assert error_of(parse_quota, text.replace(old, new, 1), "q.toml").startswith(expected)


def test_malformed_toml_keeps_line(tmp_path):
    path = write(tmp_path, "quota.toml", QUOTA.replace("v4 = 0.6", "v4 = 0.6 0.7"))
    message = error_of(load_quota, path)
    assert message.startswith(f"{path}:9:")
    assert "invalid TOML" in message


def test_default_quota():
    quota = default_quota(["vision", "nlp", "vision"], ["h100", "v4"])
    assert quota.shares == {"nlp": {"h100": 1.0, "v4": 1.0}, "vision": {"h100": 1.0, "v4": 1.0}}
    assert quota.is_member("anyone", "nlp") and quota.fractions("v4") == {"nlp": 0.5, "vision": 0.5}


# --- scenarios ---------------------------------------------------------------------------------

SCENARIO = """
cluster:
  - {name: "pool1-{0..1}", accelerator: v4, count: 4, domain: pool1}
  - {name: "gpu{00..03}", accelerator: h100, count: 8}
quota: quota.toml
scheduler:
  policy: fifo
  options: {decay: 0.9, extra: 1}
jobs:
  - name: j1
    project: project1
    user: user2
    resources: {accelerator: v4, per_worker: 4, workers: 2}
    duration: 1h
  - name: j2
    project: project2
    user: bot-1
    priority: high
    submit: 30
    duration: 600
    resources: {accelerator: h100, per_worker: 8}
  - name: j3
    project: project2
    user: user3
    submit: 45.5
    duration: 10
    resources: {accelerator: h100, per_worker: 8, slices: 2}
"""


@pytest.fixture
def scenario_dir(tmp_path) -> Path:
    write(tmp_path, "quota.toml", QUOTA)
    return tmp_path


def test_scenario_file(scenario_dir):
    scenario = load_scenario(write(scenario_dir, "s.yaml", SCENARIO))
    assert len(scenario.nodes) == 6 and scenario.nodes[2].name == "gpu00"
    j1, j2, j3 = scenario.jobs
    assert (j1.user, j1.submit, j1.duration, j1.spec.resources.workers) == ("user2", 0.0, 3600.0, 2)
    assert (j2.spec.priority, j2.submit, j2.duration) == ("high", 30.0, 600.0)
    assert j3.submit == 45.5 and j3.spec.resources.slices == 2
    # scenario keys override the quota's [scheduler]; options merge
    sched = scenario.quota.scheduler
    assert (sched.policy, sched.placement, sched.preempt_grace) == ("fifo", "spread", 30.0)
    assert sched.options["decay"] == 0.9 and sched.options["extra"] == 1
    assert sched.options["thresholds"] == [1, 2.5]
    assert scenario.quota.limits == {"project2": {"v4": 800}}


def test_scenario_inline_quota_and_shorthand(tmp_path):
    text = """
    cluster: "4x8:h100@2"
    quota: |
      [toml-schema]
      version = "1"
      [project_membership]
      p1 = ["alice"]
      [project_resources.p1]
      h100 = 1
    jobs:
      - {name: a, project: p1, user: alice, duration: 5m,
         resources: {accelerator: h100, per_worker: 8}}
    """
    scenario = load_scenario(write(tmp_path, "s.yaml", text))
    assert [n.domain for n in scenario.nodes] == ["h100-d0", "h100-d0", "h100-d1", "h100-d1"]
    assert scenario.quota.membership == {"p1": ("alice",)}
    assert scenario.jobs[0].duration == 300.0


def test_scenario_default_quota(tmp_path):
    data = {
        "cluster": "2x8:v100",
        "jobs": [
            {"name": "a", "project": "p2", "duration": 5, "resources": good_job()["resources"]},
            {"name": "b", "project": "p1", "duration": 5, "resources": good_job()["resources"]},
        ],
    }
    scenario = parse_scenario(data, tmp_path, "s.yaml")
    assert scenario.quota.shares == {"p1": {"v100": 1.0}, "p2": {"v100": 1.0}}
    assert scenario.jobs[0].user == "user" and scenario.jobs[0].submit == 0.0


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "user: user3",
            "user: bob",
            "s.yaml:23: jobs[2] (name j3): user bob is not a member of project project2",
        ),
        ("name: j3", "name: j1", "s.yaml:21: jobs[2].name: duplicate job name j1 (also jobs[0])"),
        (
            "per_worker: 8, slices",
            "per_worker: 0, slices",
            "s.yaml:26: jobs[2].resources.per_worker: must be >= 1, got 0",
        ),
        ("    duration: 10\n", "", "s.yaml:21: jobs[2].duration: required"),
        ("duration: 600", "duration: 0", "s.yaml:19: jobs[1].duration: must be a duration > 0"),
        ("submit: 30", "submit: -30", "s.yaml:18: jobs[1].submit: must be a duration >= 0"),
        (
            "priority: high",
            "priority: urgent",
            "s.yaml:17: jobs[1].priority: unknown priority class urgent",
        ),
        ("quota: quota.toml", "quota: other.toml", "s.yaml:4: quota: no quota file at"),
        ("policy: fifo", "policy: fifo\n  polcy: x", "s.yaml:7: scheduler.polcy: unknown key"),
        ("jobs:", "job:", "s.yaml:8: job: unknown key (allowed: cluster, quota, scheduler, jobs)"),
        (
            '"gpu{00..03}"',
            '"pool1-{1..2}"',
            "s.yaml:3: cluster[1].name: node pool1-1 is already defined by cluster[0]",
        ),
        ("count: 8}", "count: 0}", "s.yaml:3: cluster[1].count: must be >= 1, got 0"),
        ("name: j2", "name: Bad_Name", "s.yaml:14: jobs[1].name: must be a DNS-1123 label"),
        ("duration: 1h", "duration: 1h\n    gpus: 8", "s.yaml:14: jobs[0].gpus: unknown key"),
        (
            "  - name: j1\n",
            "  - name: j1\n    name: j0\n",
            "s.yaml:10:5: invalid YAML: duplicate key",
        ),
        ("user: user2", "user: [user2", "s.yaml:12:14: invalid YAML: "),
    ],
)
def test_bad_scenario(scenario_dir, old, new, expected):
    text = SCENARIO.lstrip("\n")
    assert old in text
    write(scenario_dir, "s.yaml", text.replace(old, new, 1))
    path = str(scenario_dir / "s.yaml")
    assert error_of(load_scenario, path).startswith(path[: -len("s.yaml")] + expected)


def test_scenario_reports_errors_in_quota_file(scenario_dir):
    write(scenario_dir, "quota.toml", QUOTA.replace('version = "1"', 'version = "2"'))
    message = error_of(load_scenario, write(scenario_dir, "s.yaml", SCENARIO))
    assert message.startswith(f"{scenario_dir / 'quota.toml'}:2: toml-schema.version")


def test_scenario_reports_errors_in_inline_quota(tmp_path):
    data = {"cluster": "1x8:h100", "quota": "[toml-schema]\nversion = '1'\n[bogus]\n", "jobs": []}
    message = error_of(parse_scenario, data, tmp_path, "s.yaml")
    assert message.startswith("s.yaml (inline quota):3: bogus: unknown key")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, "s.yaml: must be a mapping, got null"),
        ({"jobs": []}, "s.yaml: cluster: required"),
        ({"cluster": 5}, "s.yaml: cluster: must be a list of node groups or a shorthand string"),
        ({"cluster": "8xv100"}, "s.yaml: cluster: expected COUNTxPER_NODE:TYPE[@DOMAIN_SIZE]"),
    ],
)
def test_bad_scenario_shape(tmp_path, data, expected):
    assert error_of(parse_scenario, data, tmp_path, "s.yaml").startswith(expected)


# --- robustness --------------------------------------------------------------------------------


def test_malformed_json_job_reports_position(tmp_path):
    path = write(tmp_path, "job.json", '{\n\t"name": "j1",\n\t"project": "p"\n\t"kind": "batch"}\n')
    message = error_of(load_jobspec, path)
    # libyaml reads JSON with tabs; pure-Python PyYAML stops at the tab and json reports instead
    assert message.startswith((f"{path}:4:2: invalid YAML: ", f"{path}:4:2: invalid JSON: "))


def test_hostile_yaml_is_refused_quickly(tmp_path):
    laughs = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = write(tmp_path, "s.yaml", "\n".join([*laughs, "cluster: *a8", "jobs: *a8"]) + "\n")
    assert "must be a mapping" in error_of(load_scenario, path)
    deep = write(tmp_path, "deep.yaml", "name: " + "[" * 5000 + "]" * 5000 + "\n")
    # Refused in one line naming the file, whichever of PyYAML (its own depth limit, worded
    # differently across releases) or corral (RecursionError) stops first: never a traceback.
    message = error_of(load_jobspec, deep)
    assert message.startswith(str(deep)) and "invalid YAML: " in message and "\n" not in message


def test_errors_pickle_as_format_errors():
    import pickle

    with pytest.raises(FormatError) as info:
        parse_jobspec(good_job(name="Bad_Name"), "job.yaml")
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is FormatError and str(copy) == str(info.value)


def test_scenario_quota_must_be_text(tmp_path):
    data = {"cluster": "1x8:h100", "quota": {"project_membership": {}}}
    assert "quota: must be a path to a quota TOML file, or the TOML inline" in error_of(
        parse_scenario, data, tmp_path, "s.yaml"
    )
