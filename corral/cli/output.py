"""How commands print, the same for all of them: a table that never wraps when piped (one row
per item, so `corral ls | wc -l` counts jobs + 1), `-o wide|name|json`, `--no-headers`, and
the exit codes of docs/live.md ("Exit codes").

Rich renders the table on a terminal (colour, the last column folded to the window); anything
else gets plain columns separated by two spaces, never truncated, for grep, awk and cut.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

# Exit codes (docs/live.md keeps the table): 1 the control plane could not be reached or
# failed; 2 usage or bad input; 3 refused; 4 not found.
EXIT_ERROR, EXIT_USAGE, EXIT_REFUSED, EXIT_NOT_FOUND = 1, 2, 3, 4
FORMATS = ("wide", "name", "json")

OutputOpt = Annotated[
    str | None,
    typer.Option(
        "-o", "--output", metavar="FORMAT", help="wide (more columns), name (ids only) or json."
    ),
]
NoHeadersOpt = Annotated[bool, typer.Option("--no-headers", help="Leave out the header row.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (same as -o json).")]


def exit_code(status: int) -> int:
    """The CLI's exit code for an API error status."""
    if status in (400, 413, 422, 431):
        return EXIT_USAGE
    if status in (401, 403, 409):
        return EXIT_REFUSED
    if status == 404:
        return EXIT_NOT_FOUND
    return EXIT_ERROR


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    value: Callable[[dict[str, Any]], str]
    style: Callable[[dict[str, Any]], str] | None = None  # Rich style, on a terminal
    wide: bool = False  # shown only with -o wide


def check_format(output: str | None, as_json: bool, formats: Sequence[str] = FORMATS) -> str | None:
    if as_json:
        return "json"
    if output is not None and output not in formats:
        typer.echo(
            f"corral: error: --output: {output!r} is not one of {', '.join(formats)}", err=True
        )
        raise typer.Exit(EXIT_USAGE)
    return output


def print_rows(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Column],
    output: str | None = None,
    no_headers: bool = False,
    *,
    empty: str = "nothing to show",
    name: Callable[[dict[str, Any]], str] = lambda r: r["id"],
) -> None:
    """Rows as a table, names or JSON. An empty table says so on stderr: stdout stays empty."""
    if output == "json":
        print_json(list(rows))
        return
    if output == "name":
        sys.stdout.write("".join(f"{name(r)}\n" for r in rows))
        return
    if not rows:
        typer.echo(empty, err=True)
        return
    cols = [c for c in columns if output == "wide" or not c.wide]
    # No cell may break its row: a newline in a message would read as a second job.
    cells = [[" ".join(c.value(r).splitlines()) for c in cols] for r in rows]
    if sys.stdout.isatty():
        _rich_table(rows, cols, cells, no_headers)
    else:
        _plain_table([c.header for c in cols], cells, no_headers)


def _plain_table(headers: Sequence[str], cells: Sequence[Sequence[str]], no_headers: bool) -> None:
    lines = cells if no_headers else [headers, *cells]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    out = []
    for line in lines:
        text = "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
        out.append(text.rstrip() + "\n")
    sys.stdout.write("".join(out))


def _rich_table(rows, cols, cells, no_headers: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, header_style="bold", show_header=not no_headers)
    for i, c in enumerate(cols):
        table.add_column(c.header, overflow="fold" if i == len(cols) - 1 else "ellipsis")
    for row, line in zip(rows, cells, strict=True):
        styled = []
        for c, cell in zip(cols, line, strict=True):
            style = c.style(row) if c.style else ""
            styled.append(f"[{style}]{escape(cell)}[/]" if style else escape(cell))
        table.add_row(*styled)
    Console(highlight=False).print(table)
