"""JobSet manifests (`jobset.x-k8s.io/v1alpha2`) read as corral job specs, DESIGN.md §2.

A JobSet is turned into the mapping a corral job spec file holds, then validated as one:

    replicatedJobs[0].replicas            -> resources.slices
    .template.spec.parallelism            -> resources.workers
    container limit google.com/tpu | nvidia.com/gpu -> resources.per_worker
    pod nodeSelector accelerator label    -> resources.accelerator
    exclusive-topology annotation         -> resources.exclusive
    spec.failurePolicy.maxRestarts        -> max_restarts
    pod priorityClassName                 -> priority (a class of the quota's [priority_classes])
    label kueue.x-k8s.io/queue-name       -> project, when the submitter has such a project
    container command + args, env, workingDir -> command, env, workdir

What corral cannot honour (volumes, several containers, several different replicated jobs, env
from secrets) is refused with one line naming the field. What only describes a container
world that corral does without (image, ports, securityContext, hostNetwork, dnsPolicy, ...) is
accepted with a one-line warning each: workers run in the node's own environment.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from corral.formats._common import Loc, LocatedError, add_line, load_yaml, read_text, show
from corral.formats.jobspec import parse_jobspec
from corral.formats.types import JobSpec

API_VERSION = "jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
EXCLUSIVE_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
ACCELERATOR_LIMITS = ("google.com/tpu", "nvidia.com/gpu")
# nodeSelector labels whose value names the accelerator type (GKE TPUs, GKE GPUs, NVIDIA's
# GPU feature discovery, and corral's own Ray node label).
ACCELERATOR_SELECTORS = (
    "cloud.google.com/gke-tpu-accelerator",
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "corral.io/accelerator",
)

_NODE_ENV = "ignored: workers run in the node's own environment"
_REFUSED_POD = {
    "volumes": "not supported: workers see the node's own filesystem; remove volumes and use"
    " paths on the node",
    "initContainers": "not supported: corral runs one command per worker; run the setup step in"
    " the command",
}
_REFUSED_CONTAINER = {
    "volumeMounts": "not supported: workers see the node's own filesystem; use paths on the node",
    "envFrom": "not supported: corral cannot read ConfigMaps or Secrets; list the variables"
    " under env",
}
_WARNED_POD = {
    "hostNetwork": "ignored: workers always use the node's network",
    "dnsPolicy": "ignored: workers use the node's DNS",
    "securityContext": _NODE_ENV,
    "tolerations": "ignored: corral places workers itself",
    "affinity": "ignored: corral places workers itself",
    "serviceAccountName": _NODE_ENV,
}
_WARNED_CONTAINER = {
    "image": _NODE_ENV + ", not in an image",
    "imagePullPolicy": _NODE_ENV + ", not in an image",
    "ports": "ignored: workers may listen on any port of the node; MASTER_PORT is picked for them",
    "securityContext": _NODE_ENV,
}
# Fields that mean nothing to corral once the rest is mapped: accepted without a word.
_QUIET = {
    "metadata": {"name", "namespace", "labels", "annotations"},
    "spec": {"replicatedJobs", "failurePolicy", "network", "successPolicy", "suspend"},
    "replicatedJob": {"name", "replicas", "template"},
    "job": {"parallelism", "completions", "backoffLimit", "completionMode", "template"},
    "pod": {"containers", "nodeSelector", "priorityClassName", "restartPolicy", "subdomain"},
    "container": {"name", "command", "args", "env", "workingDir", "resources"},
}


class _Reader:
    """Walks one JobSet document, collecting the spec mapping and warnings as (loc, text)."""

    def __init__(self, source: str):
        self.source = source
        self.warnings: list[tuple[Loc, str]] = []

    def fail(self, loc: Loc, msg: str) -> LocatedError:
        return LocatedError(self.source, loc, msg)

    def mapping(self, value: Any, loc: Loc, required: bool = False) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self.fail(loc, f"must be a mapping, got {show(value)}")
        return value

    def fields(self, obj: dict[str, Any], loc: Loc, kind: str) -> None:
        """Refuse, warn about or quietly accept every key of `obj` that is not mapped."""
        refused = {"pod": _REFUSED_POD, "container": _REFUSED_CONTAINER}.get(kind, {})
        warned = {"pod": _WARNED_POD, "container": _WARNED_CONTAINER}.get(kind, {})
        for key in obj:
            if key in refused:
                raise self.fail((*loc, key), refused[key])
            if key in warned:
                self.warnings.append(((*loc, key), warned[key]))
            elif key not in _QUIET[kind]:
                self.warnings.append(((*loc, key), "ignored: corral does not use this field"))

    def count(self, obj: dict[str, Any], key: str, loc: Loc, default: int | None) -> int | None:
        value = obj.get(key, default)
        if value is None:
            return None
        # Kubernetes quantities are often quoted ("4"); a whole number is what corral counts.
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail((*loc, key), f"must be a whole number, got {show(value)}")
        return value


def is_jobset(data: Any) -> bool:
    """Whether loaded YAML is a Kubernetes JobSet rather than a corral job spec."""
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith("jobset.x-k8s.io")


def _replicated_job(r: _Reader, spec: dict[str, Any]) -> tuple[dict[str, Any], int, Loc]:
    """The one worker template and the number of slices (replicas summed over identical
    replicated jobs, which are one kind of worker however they are written)."""
    loc: Loc = ("spec", "replicatedJobs")
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        raise r.fail(loc, f"must be a non-empty list of replicated jobs, got {show(jobs)}")
    for i, job in enumerate(jobs):
        r.mapping(job, (*loc, i), required=True)
        r.fields(job, (*loc, i), "replicatedJob")
    first = jobs[0].get("template")
    for i, job in enumerate(jobs[1:], 1):
        if job.get("template") != first:
            names = ", ".join(str(j.get("name", "?")) for j in jobs)
            raise r.fail(
                (*loc, i),
                f"corral runs one kind of worker per job; found {len(jobs)} different replicated"
                f" jobs ({names}): submit each as its own job",
            )
    slices = sum(r.count(job, "replicas", (*loc, i), 1) or 0 for i, job in enumerate(jobs))
    if slices < 1:
        raise r.fail((*loc, 0, "replicas"), "must be at least 1")
    return r.mapping(first, (*loc, 0, "template"), required=True), slices, (*loc, 0, "template")


def _container(r: _Reader, pod: dict[str, Any], loc: Loc) -> dict[str, Any]:
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise r.fail((*loc, "containers"), f"must list one container, got {show(containers)}")
    if len(containers) > 1:
        raise r.fail(
            (*loc, "containers"),
            f"corral runs one command per worker; found {len(containers)} containers",
        )
    container = r.mapping(containers[0], (*loc, "containers", 0), required=True)
    r.fields(container, (*loc, "containers", 0), "container")
    return container


def _command(r: _Reader, container: dict[str, Any], loc: Loc) -> list[str]:
    argv: list[str] = []
    for key in ("command", "args"):
        part = container.get(key, [])
        if not isinstance(part, list) or not all(isinstance(a, str) for a in part):
            raise r.fail((*loc, key), f"must be a list of strings, got {show(part)}")
        argv += part
    if not container.get("command"):
        raise r.fail(
            (*loc, "command"),
            "required: corral runs the command on the node and has no image entrypoint to run"
            " args with",
        )
    return argv


def _env(r: _Reader, container: dict[str, Any], loc: Loc) -> dict[str, str]:
    items = container.get("env", [])
    if not isinstance(items, list):
        raise r.fail((*loc, "env"), f"must be a list of {{name, value}}, got {show(items)}")
    env: dict[str, str] = {}
    for i, item in enumerate(items):
        at = (*loc, "env", i)
        item = r.mapping(item, at, required=True)
        if "valueFrom" in item:
            raise r.fail(
                (*at, "valueFrom"),
                "not supported: corral cannot read Secrets, ConfigMaps or pod fields; give a value",
            )
        name, value = item.get("name"), item.get("value", "")
        if not isinstance(name, str) or not name:
            raise r.fail((*at, "name"), f"must be a variable name, got {show(name)}")
        if not isinstance(value, str):
            raise r.fail((*at, "value"), f"must be a string (quote it), got {show(value)}")
        env[name] = value
    return env


def _per_worker(r: _Reader, container: dict[str, Any], loc: Loc) -> int | None:
    resources = r.mapping(container.get("resources"), (*loc, "resources"))
    limits = r.mapping(resources.get("limits"), (*loc, "resources", "limits"))
    found = [key for key in ACCELERATOR_LIMITS if key in limits]
    if len(found) > 1:
        raise r.fail((*loc, "resources", "limits"), "must ask for one accelerator kind, not both")
    others = [k for k in (*limits, *r.mapping(resources.get("requests"), loc)) if k not in found]
    if others:
        r.warnings.append(
            ((*loc, "resources"), f"{', '.join(sorted(set(others)))}: ignored: not enforced")
        )
    if not found:
        return None
    return r.count(limits, found[0], (*loc, "resources", "limits"), None)


def _accelerator(r: _Reader, pod: dict[str, Any], loc: Loc) -> str | None:
    selector = r.mapping(pod.get("nodeSelector"), (*loc, "nodeSelector"))
    for key in ACCELERATOR_SELECTORS:
        if key in selector:
            value = selector[key]
            if not isinstance(value, str) or not value:
                raise r.fail((*loc, "nodeSelector", key), f"must be a string, got {show(value)}")
            return value
    return None


def _project(r: _Reader, metadata: dict[str, Any], projects: Collection[str] | None) -> str | None:
    labels = r.mapping(metadata.get("labels"), ("metadata", "labels"))
    queue = labels.get(QUEUE_LABEL)
    if queue is None:
        return None
    if projects is None or queue in projects:
        return str(queue)
    yours = ", ".join(sorted(projects)) or "none"
    r.warnings.append(
        (
            ("metadata", "labels", QUEUE_LABEL),
            f"queue {queue} is not one of your corral projects ({yours}): the job goes to your"
            " default project",
        )
    )
    return None


def jobset_to_spec(
    data: Any, source: str = "JobSet", projects: Collection[str] | None = None
) -> tuple[dict[str, Any], list[tuple[Loc, str]]]:
    """The corral job spec mapping a JobSet stands for, and warnings as (key path, text).

    `projects`: the submitter's projects, so the Kueue queue label becomes the project only
    when one of them has that name (None: take the label as it is)."""
    r = _Reader(source)
    doc = r.mapping(data, (), required=True)
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "JobSet":
        got = f"{doc.get('apiVersion')}/{doc.get('kind')}"
        raise r.fail(("apiVersion",), f"must be {API_VERSION} with kind JobSet, got {show(got)}")
    metadata = r.mapping(doc.get("metadata"), ("metadata",))
    spec = r.mapping(doc.get("spec"), ("spec",), required=True)
    r.fields(metadata, ("metadata",), "metadata")
    r.fields(spec, ("spec",), "spec")
    job, slices, job_loc = _replicated_job(r, spec)
    job_spec = r.mapping(job.get("spec"), (*job_loc, "spec"), required=True)
    r.fields(job_spec, (*job_loc, "spec"), "job")
    workers = r.count(job_spec, "parallelism", (*job_loc, "spec"), 1) or 0
    completions = r.count(job_spec, "completions", (*job_loc, "spec"), workers)
    if completions != workers:
        raise r.fail(
            (*job_loc, "spec", "completions"),
            f"must equal parallelism ({workers}): a corral gang runs every worker at once",
        )
    pod_loc: Loc = (*job_loc, "spec", "template", "spec")
    pod_template = r.mapping(job_spec.get("template"), pod_loc[:-1], required=True)
    pod = r.mapping(pod_template.get("spec"), pod_loc, required=True)
    r.fields(pod, pod_loc, "pod")
    container = _container(r, pod, pod_loc)
    c_loc: Loc = (*pod_loc, "containers", 0)

    resources: dict[str, Any] = {"workers": workers, "slices": slices}
    if (accelerator := _accelerator(r, pod, pod_loc)) is not None:
        resources["accelerator"] = accelerator
    if (per_worker := _per_worker(r, container, c_loc)) is not None:
        resources["per_worker"] = per_worker
    annotations = r.mapping(metadata.get("annotations"), ("metadata", "annotations"))
    resources["exclusive"] = EXCLUSIVE_ANNOTATION in annotations
    out: dict[str, Any] = {"resources": resources, "command": _command(r, container, c_loc)}
    if "name" in metadata:
        out["name"] = metadata["name"]
    if (project := _project(r, metadata, projects)) is not None:
        out["project"] = project
    if env := _env(r, container, c_loc):
        out["env"] = env
    if "workingDir" in container:
        out["workdir"] = container["workingDir"]
    policy = r.mapping(spec.get("failurePolicy"), ("spec", "failurePolicy"))
    if (restarts := r.count(policy, "maxRestarts", ("spec", "failurePolicy"), None)) is not None:
        out["max_restarts"] = restarts
    if "priorityClassName" in pod:
        out["priority"] = pod["priorityClassName"]
    return out, r.warnings


def _spec_loc(key: str) -> Loc:
    """Where in a JobSet each corral spec key came from, for errors found by the spec parser."""
    pod: Loc = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")
    return {
        "name": ("metadata", "name"),
        "project": ("metadata", "labels", QUEUE_LABEL),
        "max_restarts": ("spec", "failurePolicy", "maxRestarts"),
        "priority": (*pod, "priorityClassName"),
        "workdir": (*pod, "containers", 0, "workingDir"),
        "env": (*pod, "containers", 0, "env"),
        "command": (*pod, "containers", 0, "command"),
    }.get(key, ("spec", "replicatedJobs", 0))


def _check(out: dict[str, Any], source: str) -> JobSpec:
    """Validate the mapping as a job spec, completed as the server would complete it (name,
    project, accelerator and per_worker may be left to it); errors point into the JobSet."""
    full = {"name": "unnamed", "project": "default", **out}
    full["resources"] = {"accelerator": "any", "per_worker": 1, **out["resources"]}
    try:
        return parse_jobspec(full, source)
    except LocatedError as e:
        key = e.loc[0] if e.loc else ""
        raise LocatedError(source, _spec_loc(str(key)), e.msg) from None


def parse_jobset(
    data: Any, source: str = "JobSet", projects: Collection[str] | None = None
) -> tuple[JobSpec, list[tuple[Loc, str]]]:
    """A validated JobSpec from a loaded JobSet, and its warnings; FormatError if it is bad."""
    out, warnings = jobset_to_spec(data, source, projects)
    return _check(out, source), warnings


def render_warnings(warnings: list[tuple[Loc, str]], source: str, lines: Any = ()) -> list[str]:
    """One line per warning: `file[:line]: key: warning: what is ignored and why`."""
    out = []
    for loc, text in warnings:
        where = add_line(LocatedError(source, loc, "warning: " + text), source, lines or {})
        out.append(str(where))
    return out


def load_jobset(
    path: str | Path, projects: Collection[str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Read a JobSet file: the corral spec mapping it stands for, and one-line warnings."""
    source = str(path)
    data, lines = load_yaml(read_text(path), source)
    try:
        out, warnings = jobset_to_spec(data, source, projects)
        _check(out, source)  # the server's checks, here where the file's lines are known
    except LocatedError as e:
        raise add_line(e, source, lines) from None
    return out, render_warnings(warnings, source, lines)
