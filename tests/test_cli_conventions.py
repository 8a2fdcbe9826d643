"""Conventions every `corral` command keeps, checked on the command tree itself."""

from __future__ import annotations

import typer.main

from corral.cli import acct, app, crypt, interactive, live, simulate  # noqa: F401  (registers them)

# What prints something other than a result to parse, and why it has no --json.
NO_JSON = {
    "up": "a server: it logs",
    "logs": "the log's own bytes",
    "demo": "a show for people",
    "crypt-proxy": "a server",
    "ssh": "an SSH session",
    "ssh-config": "an ssh_config block, itself the machine-readable form",
    "ssh-proxy": "a byte pipe for ssh",
}


def _commands(group, prefix=()):
    for name, sub in group.commands.items():
        if hasattr(sub, "commands"):
            yield from _commands(sub, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), sub


def test_every_command_that_prints_a_result_has_json():
    commands = dict(_commands(typer.main.get_command(app)))
    assert set(NO_JSON) <= set(commands)
    lacking = {
        name
        for name, cmd in commands.items()
        if name not in NO_JSON and "--json" not in {o for p in cmd.params for o in p.opts}
    }
    assert not lacking, f"commands without --json: {sorted(lacking)}"
