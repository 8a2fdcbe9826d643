"""What the live benchmarks share: a free port, and a quota that gives the whole pool to one
project every user belongs to."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_project_quota(project: str) -> str:
    return f"""
[toml-schema]
version = "1"
[project_membership]
{project} = [".*"]
[project_resources.{project}]
gpu = 1.0
[scheduler]
preempt_grace = "1s"
"""
