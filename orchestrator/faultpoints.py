"""Named points where the reliability tests kill the orchestrator with SIGKILL.

``ORCHESTRATE_KILL_AT=after_tell:2`` kills this process the 2nd time it reaches ``after_tell``.
Unset (always, outside tests) it costs one dictionary lookup. Points, in trial order:
``after_ask``, ``after_run_start``, ``trial_running``, ``after_tell``, ``after_finish``.
"""

from __future__ import annotations

import os
import signal

_seen: dict[str, int] = {}


def reached(point: str) -> None:
    target = os.environ.get("ORCHESTRATE_KILL_AT")
    if not target:
        return
    name, _, nth = target.partition(":")
    if name != point:
        return
    _seen[point] = _seen.get(point, 0) + 1
    if _seen[point] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
