"""Job specs (YAML or JSON), DESIGN.md §2."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from corral.formats._common import (
    Count,
    LocatedError,
    NonEmptyStr,
    add_line,
    load_yaml,
    read_text,
    show,
    validate,
)
from corral.formats.durations import OptionalPositiveDuration
from corral.formats.types import JobSpec, Resources

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Gang restarts a job may ask for: a job that failed this often is not going to succeed, and
# each restart holds its accelerators again (Slurm caps requeues too: MaxBatchRequeue).
MAX_RESTARTS = 100
_NUL = "\0"  # execve and environ end a string at a NUL: no process could receive it


def _dns_label(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending"
            f" with a letter or digit, at most 63 characters, got {show(value)}"
        )
    return value


def _priority(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value:
        return value  # a class name, resolved against the quota's [priority_classes] later
    raise ValueError(f"must be an integer or a priority class name, got {show(value)}")


def _command(value: Any) -> str | tuple[str, ...]:
    if isinstance(value, str) and value.strip():
        if _NUL in value:
            raise ValueError("must not contain a NUL byte (no process can be given one)")
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        if any(_NUL in v for v in value):
            raise ValueError("arguments must not contain a NUL byte (no process can be given one)")
        return tuple(value)
    raise ValueError(
        f"must be a string (run by /bin/sh -c) or a list of strings (argv), got {show(value)}"
    )


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping of variable names to strings, got {show(value)}")
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key or "=" in key or _NUL in key:
            raise ValueError(
                f"variable names must be non-empty strings without '=' or NUL, got {show(key)}"
            )
        # YAML 1.1 reads on/off/yes/no as booleans: refuse rather than guess the spelling.
        if isinstance(val, bool) or not isinstance(val, str | int | float):
            raise ValueError(
                f"{key} must be a string or a number (quote it: YAML reads yes/no/on/off/true/false"
                f" as booleans), got {show(val)}"
            )
        if isinstance(val, str) and _NUL in val:
            raise ValueError(f"{key} must not contain a NUL byte (no process can be given one)")
        out[key] = val if isinstance(val, str) else str(val)
    return out


_TEMPLATE = re.compile(r"[a-z][-a-z0-9_]{0,62}")


def _template(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _TEMPLATE.fullmatch(value):
        raise ValueError(
            "must be a template name (jupyter, tensorboard, ssh, shell or one of the admin's):"
            f" lowercase letters, digits, '-' and '_', got {show(value)}"
        )
    return value


def _workdir(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise ValueError(f"must be an absolute path on the node, got {show(value)}")
    return value


def _crypt_backend(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("s3://", "s3+https://", "file:///")):
        raise ValueError(
            "must be where the gateway stores objects: s3://HOST:PORT[/PREFIX],"
            f" s3+https://HOST[/PREFIX] or file:///DIR, got {show(value)}"
        )
    return value


class CryptProxyModel(BaseModel):
    """`crypt_proxy:` — `corral crypt-proxy` started beside the workers (docs/crypt.md)."""

    model_config = ConfigDict(extra="forbid")

    backend: Annotated[str, BeforeValidator(_crypt_backend)]
    keyring: Annotated[str | None, BeforeValidator(_workdir)] = None


class ResourcesModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accelerator: NonEmptyStr
    per_worker: Count
    workers: Count = 1
    slices: Count = 1
    exclusive: StrictBool = False


class JobModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, BeforeValidator(_dns_label)]
    project: NonEmptyStr
    resources: ResourcesModel
    command: Annotated[str | tuple[str, ...], BeforeValidator(_command)] = ()
    priority: Annotated[int | str, BeforeValidator(_priority)] = 0
    env: Annotated[dict[str, str], BeforeValidator(_env)] = Field(default_factory=dict)
    max_restarts: Annotated[StrictInt, Field(ge=0, le=MAX_RESTARTS)] = 0
    preemptible: StrictBool = True
    max_runtime: OptionalPositiveDuration = None
    kind: Literal["batch", "interactive"] = "batch"
    template: Annotated[str | None, BeforeValidator(_template)] = None
    idle_timeout: OptionalPositiveDuration = None
    workdir: Annotated[str | None, BeforeValidator(_workdir)] = None
    crypt_proxy: CryptProxyModel | None = None

    @model_validator(mode="after")
    def _interactive(self) -> JobModel:
        """An interactive job is one worker; it is not preemptible unless it says so."""
        if self.template is not None and "kind" not in self.model_fields_set:
            self.kind = "interactive"
        if self.kind != "interactive":
            for key in ("template", "idle_timeout"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key}: only for interactive jobs (kind: interactive)")
            return self
        if self.resources.workers * self.resources.slices != 1:
            raise ValueError("resources: an interactive job is one worker (workers: 1, slices: 1)")
        if "preemptible" not in self.model_fields_set:
            self.preemptible = False
        return self

    def to_spec(self) -> JobSpec:
        return JobSpec(
            name=self.name,
            project=self.project,
            resources=Resources(**self.resources.model_dump()),
            command=self.command,
            priority=self.priority,
            env=dict(self.env),
            max_restarts=self.max_restarts,
            preemptible=self.preemptible,
            max_runtime=self.max_runtime,
            kind=self.kind,
            template=self.template,
            idle_timeout=self.idle_timeout,
            workdir=self.workdir,
            crypt_proxy=(
                None if self.crypt_proxy is None else self.crypt_proxy.model_dump(exclude_none=True)
            ),
        )


def parse_jobspec(data: dict, source: str = "job spec") -> JobSpec:
    """A validated JobSpec from already-loaded data; FormatError (one line) if it is bad."""
    return validate(JobModel, data, source).to_spec()


def load_jobspec(path: str | Path) -> JobSpec:
    """Read a job spec file, YAML or JSON (YAML contains JSON, so the content decides)."""
    source = str(path)
    data, lines = load_yaml(read_text(path), source)
    if data is None:
        raise LocatedError(source, (), "is empty; expected a job spec mapping")
    try:
        return parse_jobspec(data, source)
    except LocatedError as e:
        raise add_line(e, source, lines) from None
