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


def check_accelerators(quota: Quota, pool: list[str], source: str) -> None:
    """A quota whose shares name none of the pool's accelerator types guarantees nobody
    anything: refused (FormatError) with the fix. Types the pool lacks are only warned about
    (a pool may grow into them)."""
    named = {t for shares in quota.shares.values() for t in shares}
    named |= {t for limits in quota.limits.values() for t in limits}
    if quota.shares and pool and not named & set(pool):
        raise FormatError(
            f"{source}: [project_resources] names {', '.join(sorted(named))}, but this pool has"
            f" {', '.join(pool)}: name the pool's types in the quota file, or start corral up"
            f" with --accelerator {sorted(named)[0]} if that is what these devices are"
        )
    unknown = sorted(named - set(pool))
    if unknown:
        log.warning(
            "%s names accelerators this pool does not have (%s; it has %s): they get nothing",
            source,
            ", ".join(unknown),
            ", ".join(pool),
        )


class QuotaSource:
    """Keeps the last good quota; `poll()` reloads the file when its mtime or size changes.

    A bad edit is refused with a logged error and the previous quota stays in force; the
    broken version is not retried until the file changes again, so the log says it once.
    """

    def __init__(self, path: Path | None, accelerators: list[str]):
        self.path = path
        self.accelerators = accelerators
        self._seen: tuple[int, int] | None = None
        if path is None:
            self.quota = everything_to_default(accelerators)
            return
        self._seen = self._signature()
        self.quota = self._load()  # at start a bad file is fatal: raise FormatError

    def set_pool(self, accelerators: list[str]) -> None:
        """The pool's types changed (a Ray node of a new type joined): later reloads are checked
        against them, and the default quota (no file) covers them."""
        self.accelerators = accelerators
        if self.path is None:
            self.quota = everything_to_default(accelerators)

    def _signature(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)  # type: ignore[arg-type]
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _load(self) -> Quota:
        from corral.formats.quota import load_quota

        quota = load_quota(self.path)
        check_accelerators(quota, self.accelerators, str(self.path))
        return quota

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
