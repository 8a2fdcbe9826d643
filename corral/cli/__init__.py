"""The `corral` command. Each module below registers its commands on `app`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from corral.formats.types import FormatError

app = typer.Typer(
    name="corral",
    help="Fair-share gang scheduler for shared accelerator pools, and its trace simulator.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"corral {version('corral')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print corral's version and exit."
        ),
    ] = False,
) -> None:
    """Fair-share gang scheduler for shared accelerator pools, and its trace simulator."""


def fail(message: str, code: int = 2) -> None:
    """One clear line on stderr and a non-zero exit: how every command reports bad input."""
    typer.echo(f"corral: error: {message}", err=True)
    raise typer.Exit(code)


# Set by main(): the process is the `corral` command itself, so a batch command may end it at
# once when its work is done (see simulate) rather than free what it made, object by object.
STANDALONE = False


def main() -> None:
    from corral.cli import acct, crypt, interactive, live, simulate  # noqa: F401  (registers commands)

    global STANDALONE
    STANDALONE = True

    try:
        app()
    except FormatError as err:
        typer.echo(f"corral: error: {err}", err=True)
        sys.exit(2)
