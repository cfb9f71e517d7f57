"""Trial processes: started ahead of time, given their configuration, watched, and killed with
their whole process group on timeout, on interruption and if the orchestrator dies. Never
imports torch.

A trial still runs in a fresh process (allocators read their settings once, and an OOM must not
poison the next trial); what this package hides is the waiting. Per device slot, spares that have
Python, ``import torch``, the harness and the experiment module loaded wait, idle, on a pipe: on
Linux a fork server, which forks one process per trial; elsewhere one pre-started interpreter per
trial. One job per module:

- ``process.py``: a trial's process (``TrialProcess``; ``Interpreter``), its process group and
  what ``/proc`` says of it; ``forked.py``: a fork server and the trials it forks;
- ``trial.py``: one trial's run in its process and its timeout (``ProcessRun``, ``Launched``);
- ``spares.py``: a slot's spares, the rule on allocator settings, and the process prepared for a
  slot's next trial (``SparePool``);
- ``host.py``: the window gate, no import beside a timed window (``Host``);
- ``slot.py``: one slot's trials, one at a time (``SlotLauncher``, ``launch_trial``);
- ``runner.py``: the sweep's runner over the slots (``ProcessRunner``).

The lines exchanged with the processes are ``orchestrator/protocol.py``'s.
"""

from orchestrator.launch.forked import Forked, ForkServer, fork_server_usable
from orchestrator.launch.host import Host
from orchestrator.launch.process import SPARES_DIR, Interpreter, StopFlag, TrialProcess, cpu_seconds, kill_group
from orchestrator.launch.runner import ProcessRunner
from orchestrator.launch.slot import POLL_S, SlotLauncher, launch_trial, wait_for_activity
from orchestrator.launch.spares import PRESTART, SparePool
from orchestrator.launch.trial import EXIT_GRACE_S, IMPORT_GRACE_S, Launched, ProcessRun

__all__ = ["EXIT_GRACE_S", "IMPORT_GRACE_S", "POLL_S", "PRESTART", "SPARES_DIR", "ForkServer", "Forked", "Host",
           "Interpreter", "Launched", "ProcessRun", "ProcessRunner", "SlotLauncher", "SparePool", "StopFlag",
           "TrialProcess", "cpu_seconds", "fork_server_usable", "kill_group", "launch_trial", "wait_for_activity"]
