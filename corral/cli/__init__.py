"""The `corral` command. Each module below registers its commands on `app`."""

from __future__ import annotations

import sys

import typer

from corral.formats.types import FormatError

app = typer.Typer(
    name="corral",
    help="Fair-share gang scheduler for shared accelerator pools, and its trace simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> None:
    """One clear line on stderr and a non-zero exit: how every command reports bad input."""
    typer.echo(f"corral: error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    from corral.cli import crypt, live, simulate  # noqa: F401  (registers commands)

    try:
        app()
    except FormatError as err:
        typer.echo(f"corral: error: {err}", err=True)
        sys.exit(2)
