"""Wall-clock events of a sweep, for ``bench/overhead.py``: where a trial's time goes.

``ORCHESTRATE_TIMELINE=/path/events.jsonl`` makes the orchestrator append one JSON line per event
(``{"t": <time.time()>, "event": "ask_end", "trial": 3}``); the trial process records its own phases
in its result file (``result["timeline"]``). Unset (always, outside the benchmark) an event costs
one dictionary lookup, like ``faultpoints``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

_lock = threading.Lock()


def event(name: str, trial: int | None = None, **extra: Any) -> None:
    path = os.environ.get("ORCHESTRATE_TIMELINE")
    if not path:
        return
    line = json.dumps({"t": time.time(), "event": name, "trial": trial, **extra}) + "\n"
    with _lock, open(path, "a") as f:  # a writer thread records MLflow events: one line at a time
        f.write(line)
