"""Check mode for the core's memos: with CORRAL_CHECK_MEMOS=1 in the environment, every
memoised answer that has a check here is computed again from scratch where it is used, and a
difference stops the run (an AssertionError) naming the memo and both answers. Off, each check
costs one test of a constant. CI runs the rule and scenario tests once in this mode
(tests/test_memo_check.py)."""

from __future__ import annotations

import os
from typing import Final

CHECKING: Final = os.environ.get("CORRAL_CHECK_MEMOS") == "1"


def same(memo: str, kept: object, fresh: object) -> None:
    """Fail loudly unless the memoised answer is the one computed from scratch."""
    if kept != fresh:
        raise AssertionError(f"memo {memo}: kept {kept!r}, from scratch {fresh!r}")
