"""Quota files: the AXLearn bastion TOML (schema version "1") plus corral's optional tables."""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, TypeAdapter

from corral.formats._common import (
    Loc,
    LocatedError,
    NonEmptyStr,
    read_text,
    show,
    validate,
)
from corral.formats.durations import Duration, OptionalPositiveDuration
from corral.formats.types import FormatError, InteractiveConfig, Quota, SchedulerConfig

_DEFAULT = SchedulerConfig()


def _version(value: Any) -> str:
    # The bastion compares with the string "1"; an integer 1 would be refused there too.
    if value != "1" or not isinstance(value, str):
        raise ValueError(
            f'unsupported version; only "1" (a string) is supported, got {show(value)}'
        )
    return value


def _share(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise ValueError(f"share must be a number >= 0, got {show(value)}")
    return float(value)


def _amount(value: Any) -> int:
    # The bastion reads totals as floats; corral counts whole accelerators.
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(f"must be a whole number >= 0, got {show(value)}")
    return int(value)


def _regex(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a regular expression string, got {show(value)}")
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e}), got {show(value)}") from None
    return value


def _members(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(
            f'must be a list of user-id regexes like ["alice", "ml-.*"], got {show(value)}'
        )
    return value


def _option(value: Any) -> object:
    ok = isinstance(value, int | float | str) or (
        isinstance(value, list)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )
    if not ok:
        raise ValueError(f"must be a number, string, boolean or list of numbers, got {show(value)}")
    return value


_ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


def _account(value: Any) -> str:
    if not isinstance(value, str) or not _ACCOUNT.fullmatch(value):
        raise ValueError(
            "must be a Unix account name (letters, digits, '_', '.', '-', at most 32),"
            f" got {show(value)}"
        )
    return value


Share = Annotated[float, BeforeValidator(_share)]
Amount = Annotated[int, BeforeValidator(_amount)]
Regex = Annotated[str, BeforeValidator(_regex)]
Limit = Annotated[StrictInt, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SchemaModel(_Strict):
    version: Annotated[str, BeforeValidator(_version)]


class AdminsModel(_Strict):
    users: list[NonEmptyStr] = Field(default_factory=list)


class SchedulerModel(_Strict):
    """[scheduler] of a quota file, or `scheduler:` of a scenario; only keys written count."""

    policy: NonEmptyStr = _DEFAULT.policy
    placement: Literal["pack", "spread"] = "pack"
    preempt_grace: Duration = _DEFAULT.preempt_grace
    preempt_min_runtime: Duration = _DEFAULT.preempt_min_runtime
    usage_half_life: Duration = _DEFAULT.usage_half_life
    aging_limit: Duration = _DEFAULT.aging_limit
    restart_backoff: Duration = _DEFAULT.restart_backoff
    restart_backoff_max: Duration = _DEFAULT.restart_backoff_max
    options: dict[str, Annotated[object, BeforeValidator(_option)]] = Field(default_factory=dict)

    def apply(self, base: SchedulerConfig = _DEFAULT) -> SchedulerConfig:
        """`base` with the keys this section sets; options merge, this section's keys winning."""
        changes = {k: getattr(self, k) for k in self.model_fields_set}
        if "options" in changes:
            changes["options"] = {**base.options, **self.options}
        return replace(base, **changes)


_INTERACTIVE = InteractiveConfig()


class InteractiveModel(_Strict):
    """[interactive]: defaults and caps for interactive jobs (docs/interactive.md)."""

    max_runtime: OptionalPositiveDuration = _INTERACTIVE.max_runtime
    max_runtime_limit: OptionalPositiveDuration = _INTERACTIVE.max_runtime_limit
    idle_timeout: OptionalPositiveDuration = _INTERACTIVE.idle_timeout

    def to_config(self) -> InteractiveConfig:
        return InteractiveConfig(self.max_runtime, self.max_runtime_limit, self.idle_timeout)


class QuotaModel(_Strict):
    toml_schema: SchemaModel = Field(alias="toml-schema")
    total_resources: Any = None  # a table or tiers; validated by _total_resources
    project_membership: dict[str, Annotated[list[Regex], BeforeValidator(_members)]] = Field(
        default_factory=dict
    )
    project_resources: dict[str, dict[str, Share]] = Field(default_factory=dict)
    project_limits: dict[str, dict[str, Limit]] = Field(default_factory=dict)
    priority_classes: dict[str, StrictInt] = Field(default_factory=dict)
    admins: AdminsModel = Field(default_factory=AdminsModel)
    scheduler: SchedulerModel = Field(default_factory=SchedulerModel)
    project_interactive_limits: dict[str, dict[str, Limit]] = Field(default_factory=dict)
    interactive: InteractiveModel = Field(default_factory=InteractiveModel)
    accounts: dict[str, Annotated[str, BeforeValidator(_account)]] = Field(default_factory=dict)
    # project -> its own preempt_min_runtime, instead of [scheduler]'s
    project_preempt_min_runtime: dict[str, Duration] = Field(default_factory=dict)


_TIER = TypeAdapter(dict[str, Amount])
_TIERS = TypeAdapter(list[dict[str, Amount]])


def _total_resources(raw: Any, source: str) -> dict[str, int] | None:
    """[total_resources] as one table, or [[total_resources]] tiers summed per type."""
    if raw is None:
        return None
    at = ("total_resources",)
    if isinstance(raw, dict):
        tiers = [validate(_TIER, raw, source, at)]
    else:
        tiers = validate(_TIERS, raw, source, at)
    total: dict[str, int] = {}
    for tier in tiers:
        for kind, amount in tier.items():
            total[kind] = total.get(kind, 0) + amount
    return total


def _check_projects(model: QuotaModel, source: str) -> None:
    """Shares and limits only for projects with a membership entry (the bastion needs it)."""
    known = ", ".join(sorted(model.project_membership)) or "none"
    tables = (
        "project_resources",
        "project_limits",
        "project_interactive_limits",
        "project_preempt_min_runtime",
    )
    for table in tables:
        for project in getattr(model, table):
            if project not in model.project_membership:
                raise LocatedError(
                    source,
                    (table, project),
                    f"project {project} has no entry in [project_membership] (projects there:"
                    f' {known}); add {project} = ["<user regex>", ...] to it',
                )


# --- line numbers for semantic errors ---------------------------------------------------------

_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"\s*(\[\[?)\s*({_DOTTED})\s*\]")
_ASSIGN = re.compile(rf"\s*({_DOTTED})\s*=")


def _keys(dotted: str) -> Loc:
    return tuple(k.strip("\"'") for k in re.findall(_KEY, dotted))


def toml_line(text: str, loc: Loc) -> int | None:
    """Line of the header or `key =` that names the longest prefix of `loc`."""
    table: Loc = ()
    seen_arrays: dict[Loc, int] = {}
    best, best_len = None, 0
    for number, line in enumerate(text.splitlines(), 1):
        if m := _HEADER.match(line):
            table = _keys(m[2])
            if m[1] == "[[":  # the n-th [[x]] is x[n] in the error's path
                seen_arrays[table] = seen_arrays.get(table, -1) + 1
                table = (*table, seen_arrays[table])
            path = table
        elif m := _ASSIGN.match(line):
            path = (*table, *_keys(m[1]))
        else:
            continue
        if len(path) > best_len and tuple(loc[: len(path)]) == path:
            best, best_len = number, len(path)
    return best


def _decode(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        if m := re.search(r" \(at line (\d+), column (\d+)\)$", msg):
            raise FormatError(f"{source}:{m[1]}:{m[2]}: invalid TOML: {msg[: m.start()]}") from None
        raise FormatError(f"{source}: invalid TOML: {msg}") from None
    except RecursionError:
        raise FormatError(f"{source}: invalid TOML: nested too deeply") from None


def _build(doc: dict[str, Any], source: str) -> Quota:
    if "toml-schema" not in doc:
        raise LocatedError(source, ("toml-schema",), 'required: add [toml-schema] version = "1"')
    model: QuotaModel = validate(QuotaModel, doc, source)
    total = _total_resources(model.total_resources, source)
    _check_projects(model, source)
    return Quota(
        shares={p: dict(s) for p, s in model.project_resources.items()},
        membership={p: tuple(r) for p, r in model.project_membership.items()},
        total_resources=total,
        limits={p: dict(v) for p, v in model.project_limits.items()},
        priority_classes=dict(model.priority_classes),
        admins=tuple(model.admins.users),
        scheduler=replace(
            model.scheduler.apply(), project_min_runtime=dict(model.project_preempt_min_runtime)
        ),
        interactive_limits={p: dict(v) for p, v in model.project_interactive_limits.items()},
        interactive=model.interactive.to_config(),
        accounts=dict(model.accounts),
    )


def parse_quota(text: str, source: str = "quota") -> Quota:
    """A Quota from TOML text; FormatError naming source, line, key and what is allowed."""
    doc = _decode(text, source)
    try:
        return _build(doc, source)
    except LocatedError as e:
        raise e.at_line(toml_line(text, e.loc)) from None


def load_quota(path: str | Path) -> Quota:
    return parse_quota(read_text(path), str(path))


def default_quota(projects: list[str], accelerators: list[str]) -> Quota:
    """Equal shares of every type for every project, anyone a member: for runs without a file."""
    names = sorted(set(projects))
    return Quota(
        shares={p: {a: 1.0 for a in sorted(set(accelerators))} for p in names},
        membership={p: (".*",) for p in names},
    )
