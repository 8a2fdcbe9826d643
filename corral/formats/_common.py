"""Plumbing shared by the parsers: reading files, YAML with line numbers, one-line errors.

Every parser reports bad input as a FormatError whose text is one line:
`<file>[:<line>]: <key path>: <what is wrong and what is allowed>`.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, StrictInt, TypeAdapter, ValidationError

from corral.formats.types import FormatError

Loc = tuple[str | int, ...]

# Field types shared by the models: strict, so YAML's "8" or 8.0 is not silently an int.
NonEmptyStr = Annotated[str, Field(min_length=1, strict=True)]
Count = Annotated[StrictInt, Field(ge=1)]


def _scalar(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _render(value: Any, budget: int, depth: int = 0) -> str:
    """JSON-like text that stops once `budget` characters are spent: inputs can be huge."""
    if not isinstance(value, dict | list | tuple):
        return _scalar(value)
    if depth > 8:
        return "..."
    items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    parts: list[str] = []
    for key, item in items:
        if budget <= 0:
            parts.append("...")
            break
        text = _render(item, budget, depth + 1)
        parts.append(text if key is None else f"{_scalar(key)}: {text}")
        budget -= len(parts[-1]) + 2
    open_, close = "{}" if isinstance(value, dict) else "[]"
    return open_ + ", ".join(parts) + close


def show(value: Any, limit: int = 60) -> str:
    """A short, JSON-like rendering of a user's value for error messages."""
    text = _render(value, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_loc(loc: Loc) -> str:
    """('jobs', 2, 'resources', 'per_worker') -> 'jobs[2].resources.per_worker'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class LocatedError(FormatError):
    """A FormatError that remembers where it points, so a loader can add the line later."""

    def __init__(
        self, source: str, loc: Loc, msg: str, *, line: int | None = None, key: str | None = None
    ):
        self.source, self.loc, self.msg, self.line = source, tuple(loc), msg, line
        self.key = format_loc(loc) if key is None else key
        where = source if line is None else f"{source}:{line}"
        text = f"{where}: {self.key}: {msg}" if self.key else f"{where}: {msg}"
        super().__init__(text.replace("\r", "\\r").replace("\n", "\\n"))  # keys may hold any text

    def __reduce__(self):  # pickles (e.g. across sim worker processes) as a plain FormatError
        return FormatError, (str(self),)

    def at_line(self, line: int | None) -> LocatedError:
        return LocatedError(self.source, self.loc, self.msg, line=line, key=self.key)


def add_line(err: LocatedError, source: str, lines: Mapping[Loc, int]) -> LocatedError:
    """Attach the line of the deepest known prefix of err.loc, for errors about `source` only."""
    if err.source != source or err.line is not None:
        return err
    for n in range(len(err.loc), -1, -1):
        if err.loc[:n] in lines:
            return err.at_line(lines[err.loc[:n]])
    return err


def read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise FormatError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


# --- YAML -------------------------------------------------------------------------------------


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # C parser when built
    """SafeLoader that refuses duplicate keys: PyYAML would silently keep the last one."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # unhashable key: let the base constructor report it
            continue
        if first != key_node.start_mark.line + 1:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {show(key)} (first on line {first})",
                key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _node_lines(
    loader: yaml.SafeLoader, node: yaml.Node, loc: Loc, out: dict[Loc, int], seen: set[int]
) -> None:
    out.setdefault(loc, node.start_mark.line + 1)
    if id(node) in seen:  # an alias: walk each node once, or a "billion laughs" file hangs us
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(loader, item, (*loc, i), out, seen)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = loader.construct_object(key_node)
            # The key's own line is where a reader looks, even for a nested value.
            out.setdefault((*loc, key), key_node.start_mark.line + 1)
            _node_lines(loader, value, (*loc, key), out, seen)


class LineMap(Mapping[Loc, int]):
    """Key path -> line of a YAML document, worked out only when an error asks for it."""

    def __init__(self, node: yaml.Node | None = None):
        self._node, self._lines = node, None

    def _map(self) -> dict[Loc, int]:
        if self._lines is None:
            self._lines = {}
            try:
                if self._node is not None:
                    _node_lines(yaml.SafeLoader(""), self._node, (), self._lines, set())
            except RecursionError:  # absurdly deep: keep the lines found so far
                pass
        return self._lines

    def __getitem__(self, loc: Loc) -> int:
        return self._map()[loc]

    def __iter__(self):
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())


def _yaml_error(e: yaml.YAMLError, source: str) -> FormatError:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or " ".join(str(e).split())
    if mark is None:
        return FormatError(f"{source}: invalid YAML: {problem}")
    return FormatError(f"{source}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}")


def _json_or_error(text: str, source: str, e: yaml.YAMLError) -> Any:
    """JSON with tabs is not YAML: try it as JSON, and blame the parser that got further."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as j:
        mark = getattr(e, "problem_mark", None)
        if mark is not None and mark.index >= j.pos:
            raise _yaml_error(e, source) from None
        raise FormatError(f"{source}:{j.lineno}:{j.colno}: invalid JSON: {j.msg}") from None
    except RecursionError:
        raise FormatError(f"{source}: invalid JSON: nested too deeply") from None


def load_yaml(text: str, source: str) -> tuple[Any, LineMap]:
    """Parse YAML (or JSON, which YAML contains) into data and a map key-path -> line."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, LineMap()
        return loader.construct_document(node), LineMap(node)
    except yaml.YAMLError as e:
        if text.lstrip()[:1] in ("{", "["):
            return _json_or_error(text, source, e), LineMap()
        raise _yaml_error(e, source) from None
    except RecursionError:
        raise FormatError(f"{source}: invalid YAML: nested too deeply") from None
    finally:
        loader.dispose()


# --- pydantic ---------------------------------------------------------------------------------


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _inner_model(arg)) is not None:
            return found
    return None


def _model_at(model: type[BaseModel] | None, loc: Loc) -> type[BaseModel] | None:
    """The model that validates the mapping at `loc` (list indices are skipped)."""
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or name: f for name, f in (model.model_fields if model else {}).items()}
        if part not in fields:
            return None
        model = _inner_model(fields[part].annotation)
    return model


_PLAIN = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "string_too_short": "must not be empty",
}


def _describe(error: Mapping[str, Any], model: type[BaseModel] | None) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind == "extra_forbidden":
        target = _model_at(model, tuple(error["loc"][:-1]))
        if target is None:
            return "unknown key"
        allowed = ", ".join(f.alias or n for n, f in target.model_fields.items())
        return f"unknown key (allowed: {allowed})"
    if kind == "missing":
        return "required"
    if kind == "literal_error":
        text = f"must be {ctx.get('expected')}"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<="}
        text = f"must be {op.get(kind, '<')} {next(iter(ctx.values()), '?')}"
    else:
        text = _PLAIN.get(kind, error["msg"])
    return f"{text}, got {show(error.get('input'))}"


def validation_error(
    err: ValidationError, source: str, model: type[BaseModel] | None = None, at: Loc = ()
) -> LocatedError:
    """pydantic's many-line ValidationError -> one line about the first problem."""
    errors = err.errors(include_url=False)
    first = errors[0]
    msg = _describe(first, model)
    if len(errors) > 1:
        more = len(errors) - 1
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return LocatedError(source, (*at, *first["loc"]), msg)


def validate(
    schema: type[BaseModel] | TypeAdapter,
    data: Any,
    source: str,
    at: Loc = (),
    model: type[BaseModel] | None = None,
) -> Any:
    """Validate data against a model, or a TypeAdapter over `model`, raising LocatedError."""
    try:
        if isinstance(schema, TypeAdapter):
            return schema.validate_python(data)
        return schema.model_validate(data)
    except ValidationError as e:
        model = schema if isinstance(schema, type) else model
        raise validation_error(e, source, model, at) from None
