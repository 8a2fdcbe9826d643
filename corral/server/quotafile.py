"""The quota in force: the default one, or a file reloaded when it changes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from corral.formats.types import FormatError, Quota

log = logging.getLogger("corral.server")

DEFAULT_PROJECT = "default"


def everything_to_default(accelerators: list[str]) -> Quota:
    """Without a quota file: one project, "default", that everyone belongs to and that is
    guaranteed the whole pool. Admins are the holders of --admin tokens."""
    return Quota(
        shares={DEFAULT_PROJECT: {a: 1.0 for a in accelerators}},
        membership={DEFAULT_PROJECT: (".*",)},
    )


class QuotaSource:
    """Keeps the last good quota; `poll()` reloads the file when its mtime or size changes.

    A bad edit is refused with a logged error and the previous quota stays in force; the
    broken version is not retried until the file changes again, so the log says it once.
    """

    def __init__(self, path: Path | None, accelerators: list[str]):
        self.path = path
        self._seen: tuple[int, int] | None = None
        if path is None:
            self.quota = everything_to_default(accelerators)
            return
        self._seen = self._signature()
        self.quota = self._load()  # at start a bad file is fatal: raise FormatError

    def _signature(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _load(self) -> Quota:
        from corral.formats.quota import load_quota

        return load_quota(self.path)

    def poll(self) -> Quota | None:
        """The new quota if the file changed and parses; None otherwise."""
        if self.path is None:
            return None
        seen = self._signature()
        if seen == self._seen:
            return None
        self._seen = seen
        if seen is None:
            log.error("quota file %s is gone; keeping the last good quota", self.path)
            return None
        try:
            quota = self._load()
        except (FormatError, OSError) as err:
            log.error("quota file %s refused, keeping the last good quota: %s", self.path, err)
            return None
        log.info(
            "quota file %s reloaded: projects %s, policy %s",
            self.path,
            ", ".join(quota.projects) or "none",
            quota.scheduler.policy,
        )
        self.quota = quota
        return quota
