"""``python -m orchestrator.harness``: the entry of every trial process; it only dispatches.

- ``CONFIG.json``: one trial, started cold (``child.main``);
- ``--serve EXPERIMENT [FOLDER]``: a pre-started interpreter, given its configuration on stdin
  (``child.serve``);
- ``--fork-server EXPERIMENT [FOLDER]`` (Linux): one import, then a forked process per trial
  (``forkserver.fork_server``).

``FOLDER`` (the study's trial folder) is only there for ``ps``. Nothing imports this module: under
``python -m`` it is the running ``__main__``, and importing it by name would load it a second
time; the code lives in ``child.py`` and ``forkserver.py``.
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__" and sys.platform.startswith("linux"):
    # Before the imports below (a second or more on a loaded machine): from here on, an
    # orchestrator killed during its start-up takes this process with it (SIGTERM's default
    # action, until ``child.watch_parent`` installs its handler); one that died already is seen.
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    _parent = os.environ.get("ORCHESTRATE_PARENT_PID", "")
    if _parent.isdigit() and os.getppid() != int(_parent):
        os._exit(1)

from orchestrator.harness import subreaper  # noqa: E402 - after the parent's death is watched
from orchestrator.harness.child import main, serve  # noqa: E402
from orchestrator.harness.forkserver import fork_server  # noqa: E402
from orchestrator.protocol import FORK_SERVER_FLAG, SERVE_FLAG  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == SERVE_FLAG:  # [4]: the study's folder, for ps
        code = serve(sys.argv[2])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == FORK_SERVER_FLAG:
        code = fork_server(sys.argv[2])
    else:
        code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    subreaper.end_descendants()  # nothing it started outlives it, setsid or not
    if os.environ.get("ORCHESTRATE_TEST_EXIT_DELAY_S"):  # tests only: a process slow to exit
        time.sleep(float(os.environ["ORCHESTRATE_TEST_EXIT_DELAY_S"]))
    os._exit(code)  # the result is on disk: skip the interpreter's teardown (torch's takes ~1 s)
