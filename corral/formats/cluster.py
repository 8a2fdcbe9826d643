"""Cluster inventory: node groups (YAML) and the simulator's shorthand ("64x8:v100@4")."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictStr, TypeAdapter

from corral.formats._common import (
    Count,
    Loc,
    LocatedError,
    NonEmptyStr,
    add_line,
    format_loc,
    load_yaml,
    read_text,
    show,
    validate,
)
from corral.formats.types import Node

MAX_NODES = 1_000_000  # a typo like {0..99999999} should fail fast, not eat the memory

_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_SHORTHAND = re.compile(r"(\d+)x(\d+):([A-Za-z0-9][A-Za-z0-9_.-]*)(?:@(\d+))?")
SHORTHAND_FORMS = "COUNTxPER_NODE:TYPE[@DOMAIN_SIZE], comma-separated, e.g. 64x8:v100,16x4:a100@4"


class NodeGroupModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: NonEmptyStr
    accelerator: NonEmptyStr
    count: Count  # accelerators per node
    domain: StrictStr | None = None


_GROUPS = TypeAdapter(list[NodeGroupModel])


def _range_values(a: str, b: str) -> list[str]:
    lo, hi = int(a), int(b)
    if lo > hi:
        raise ValueError(f"range {{{a}..{b}}} must not go down")
    # Like bash: a leading zero on either end pads every value to the wider end.
    padded = any(len(x) > 1 and x.startswith("0") for x in (a, b))
    width = max(len(a), len(b)) if padded else 0
    return [str(i).zfill(width) for i in range(lo, hi + 1)]


def expand_name(name: str) -> list[str]:
    """'n{0..1}-{00..02}' -> n0-00, n0-01, n0-02, n1-00, ...; ValueError when malformed."""
    parts = _RANGE.split(name)
    literals, bounds = parts[0::3], list(zip(parts[1::3], parts[2::3], strict=True))
    if any("{" in lit or "}" in lit for lit in literals):
        raise ValueError(f"ranges are written {{a..b}} with integers a <= b, got {show(name)}")
    values = [_range_values(a, b) for a, b in bounds]
    if math.prod(len(v) for v in values) > MAX_NODES:
        raise ValueError(f"expands to more than {MAX_NODES} nodes, got {show(name)}")
    return [
        "".join(itertools.chain.from_iterable(itertools.zip_longest(literals, combo, fillvalue="")))
        for combo in itertools.product(*values)
    ]


def _check_unique(nodes: list[Node], owner: list[Loc], source: str) -> None:
    seen: dict[str, Loc] = {}
    for node, loc in zip(nodes, owner, strict=True):
        if node.name in seen:
            first = format_loc(seen[node.name])
            msg = f"node {node.name} is already defined by {first}; node names must be unique"
            raise LocatedError(source, (*loc, "name"), msg)
        seen[node.name] = loc


def parse_cluster(data: list, source: str = "cluster", *, at: Loc = ()) -> tuple[Node, ...]:
    """Nodes from a list of node groups; `at` is the key path of `data` in a larger file."""
    groups: list[NodeGroupModel] = validate(_GROUPS, data, source, at, NodeGroupModel)
    if not groups:
        raise LocatedError(source, at, "must list at least one node group")
    nodes: list[Node] = []
    owner: list[Loc] = []
    for i, group in enumerate(groups):
        try:
            names = expand_name(group.name)
        except ValueError as e:
            raise LocatedError(source, (*at, i, "name"), str(e)) from None
        domain = group.domain or ""
        nodes += [Node(n, group.accelerator, group.count, domain) for n in names]
        owner += [(*at, i)] * len(names)
    _check_unique(nodes, owner, source)
    return tuple(nodes)


def _shorthand_item(item: str, source: str) -> tuple[int, int, str, int]:
    """'16x4:a100@4' -> (16, 4, 'a100', 4); a domain size of 0 means no domains."""
    m = _SHORTHAND.fullmatch("".join(item.split()))
    count, per_node, size = (int(m[1]), int(m[2]), int(m[4] or 1)) if m else (0, 0, 0)
    if min(count, per_node, size) < 1:
        raise LocatedError(source, (), f"expected {SHORTHAND_FORMS}, got {show(item.strip())}")
    return count, per_node, m[3], size if m[4] else 0


def parse_cluster_shorthand(text: str, source: str = "cluster shorthand") -> tuple[Node, ...]:
    """'64x8:v100,16x4:a100@4': nodes named TYPE-i, numbered on across groups of one type;
    '@D' puts each D consecutive nodes in a domain TYPE-dK."""
    next_node: dict[str, int] = {}
    next_domain: dict[str, int] = {}
    nodes: list[Node] = []
    for item in str(text).split(","):
        count, per_node, acc, size = _shorthand_item(item, source)
        if len(nodes) + count > MAX_NODES:
            raise LocatedError(source, (), f"more than {MAX_NODES} nodes, got {show(text)}")
        first, dom0 = next_node.get(acc, 0), next_domain.get(acc, 0)
        for k in range(count):
            domain = f"{acc}-d{dom0 + k // size}" if size else ""
            nodes.append(Node(f"{acc}-{first + k}", acc, per_node, domain))
        next_node[acc] = first + count
        next_domain[acc] = dom0 + (math.ceil(count / size) if size else 0)
    return tuple(nodes)


def load_cluster(path: str | Path) -> tuple[Node, ...]:
    """Read a YAML list of node groups (or a file holding just a shorthand string)."""
    source = str(path)
    data, lines = load_yaml(read_text(path), source)
    if isinstance(data, str):
        return parse_cluster_shorthand(data, source)
    try:
        return parse_cluster(data, source)
    except LocatedError as e:
        raise add_line(e, source, lines) from None
