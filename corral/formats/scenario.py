"""Scenario files: the simulator's input (cluster, quota, scheduler overrides, timed jobs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from corral.formats._common import (
    LocatedError,
    NonEmptyStr,
    add_line,
    load_yaml,
    read_text,
    show,
    validate,
)
from corral.formats.cluster import SHORTHAND_FORMS, parse_cluster, parse_cluster_shorthand
from corral.formats.durations import Duration, PositiveDuration
from corral.formats.jobspec import JobModel
from corral.formats.quota import SchedulerModel, default_quota, load_quota, parse_quota
from corral.formats.types import Node, Quota, Scenario, ScenarioJob


def _quota_text(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    raise ValueError(f"must be a path to a quota TOML file, or the TOML inline, got {show(value)}")


class ScenarioJobModel(JobModel):
    submit: Duration = 0.0  # seconds from the start of the run
    duration: PositiveDuration  # seconds of running needed to finish
    user: NonEmptyStr = "user"


class ScenarioModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: Any  # node groups or a shorthand string; see _nodes
    quota: Annotated[str | None, BeforeValidator(_quota_text)] = None
    scheduler: SchedulerModel | None = None
    jobs: list[ScenarioJobModel] = Field(default_factory=list)


def _nodes(cluster: Any, source: str) -> tuple[Node, ...]:
    if isinstance(cluster, str):
        try:
            return parse_cluster_shorthand(cluster, source)
        except LocatedError as e:
            raise LocatedError(source, ("cluster",), e.msg) from None
    if isinstance(cluster, list):
        return parse_cluster(cluster, source, at=("cluster",))
    raise LocatedError(
        source,
        ("cluster",),
        f"must be a list of node groups or a shorthand string ({SHORTHAND_FORMS}),"
        f" got {show(cluster)}",
    )


def _quota(model: ScenarioModel, nodes: tuple[Node, ...], base_dir: Path, source: str) -> Quota:
    text = model.quota
    if text is None:
        projects = [job.project for job in model.jobs]
        return default_quota(projects, [node.accelerator for node in nodes])
    if "\n" in text or "[" in text:  # inline TOML; its line numbers count from its first line
        return parse_quota(text, f"{source} (inline quota)")
    path = base_dir / text.strip()
    if not path.is_file():
        raise LocatedError(
            source,
            ("quota",),
            f"no quota file at {path} (relative paths start at"
            " the scenario's directory; inline TOML is allowed too)",
        )
    return load_quota(path)


def _job(i: int, job: ScenarioJobModel, quota: Quota, source: str) -> ScenarioJob:
    if not quota.is_member(job.user, job.project):
        members = ", ".join(quota.membership.get(job.project, ())) or "none"
        raise LocatedError(
            source,
            ("jobs", i, "user"),
            f"user {job.user} is not a member of project {job.project} (members match: {members})",
            key=f"jobs[{i}] (name {job.name})",
        )
    if isinstance(job.priority, str) and job.priority not in quota.priority_classes:
        classes = ", ".join(sorted(quota.priority_classes)) or "none defined in the quota"
        raise LocatedError(
            source,
            ("jobs", i, "priority"),
            f"unknown priority class {job.priority} (an integer, or one of: {classes})",
        )
    return ScenarioJob(spec=job.to_spec(), user=job.user, submit=job.submit, duration=job.duration)


def _jobs(model: ScenarioModel, quota: Quota, source: str) -> tuple[ScenarioJob, ...]:
    first: dict[str, int] = {}
    for i, job in enumerate(model.jobs):
        if (j := first.setdefault(job.name, i)) != i:
            raise LocatedError(
                source, ("jobs", i, "name"), f"duplicate job name {job.name} (also jobs[{j}])"
            )
    return tuple(_job(i, job, quota, source) for i, job in enumerate(model.jobs))


def parse_scenario(data: dict, base_dir: Path, source: str = "scenario") -> Scenario:
    """A Scenario from loaded YAML; a relative quota path is read from `base_dir`."""
    model: ScenarioModel = validate(ScenarioModel, data, source)
    nodes = _nodes(model.cluster, source)
    quota = _quota(model, nodes, Path(base_dir), source)
    if model.scheduler is not None:  # the scenario's keys override the quota's [scheduler]
        quota = replace(quota, scheduler=model.scheduler.apply(quota.scheduler))
    return Scenario(nodes=nodes, quota=quota, jobs=_jobs(model, quota, source))


def load_scenario(path: str | Path) -> Scenario:
    source = str(path)
    data, lines = load_yaml(read_text(path), source)
    try:
        return parse_scenario(data, Path(path).parent, source)
    except LocatedError as e:
        raise add_line(e, source, lines) from None
