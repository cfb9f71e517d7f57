"""The sweep's trial runner: real processes, one ``SlotLauncher`` per device slot. Never imports
torch. The sweep loop is given a runner (this, or ``replay.ReplayRunner`` over a recorded
landscape) and drives it through this interface."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.protocol import TrialConfig
from orchestrator.launch.host import Host
from orchestrator.launch.process import StopFlag
from orchestrator.launch.slot import SlotLauncher, end_all, wait_for_activity
from orchestrator.launch.spares import PRESTART

PREPARED_DEVICES = ("cuda",)
"""Where a slot's next process is prepared ahead (``SparePool.prepare_next``): a CUDA context
takes 0.3 s a process on an H100. A CPU has nothing to initialise, and a small one has no core to
spare for a process forked early (MPS has no fork server)."""
from orchestrator.launch.slots import Slot
from orchestrator.launch.trial import ProcessRun

if TYPE_CHECKING:
    from orchestrator.launch.process import Interpreter


class ProcessRunner:
    """Runs trials in real processes, one ``SlotLauncher`` per device slot. Made at start-up,
    before the study is open, so that each slot's fork server can start importing then
    (``prewarm``); ``open`` gives it the study's trial folder before the first trial."""

    def __init__(self, slots: list[Slot], experiment: str, where: Path, stop: StopFlag,
                 prestart: int = PRESTART, fixed: dict[str, Any] | None = None) -> None:
        """``fixed``: the sweep's fixed parameters, for the experiment's preload hook
        (``orchestrator/harness/ahead.py``)."""
        self.slots = slots
        host = Host()
        self.launchers = [SlotLauncher(experiment, s.env, s.cores, None, stop, prestart, host, where=where,
                                       fixed=fixed) for s in slots]

    def prewarm(self, env: dict[str, str], log_path: Path | None = None) -> Interpreter | None:
        """Every slot's fork server, starting now, for trials that will need ``env``; the first
        slot's is returned (None where there are no fork servers), its output to ``log_path``
        (it answers the experiment's probe: ``checks.Probe``)."""
        first = [launcher.prewarm(env, log_path if i == 0 else None) for i, launcher in enumerate(self.launchers)]
        return first[0]

    def prepare(self, device: str) -> None:
        """Every slot's first trial process, forked now and initialising ``device`` (each slot's
        next one is prepared once its trial's window is over: ``SlotLauncher.tick``); only where
        there is a device to initialise (``PREPARED_DEVICES``)."""
        if device not in PREPARED_DEVICES and not os.environ.get("ORCHESTRATE_TEST_PREPARE_CPU"):
            return  # (tests only: the variable prepares CPU trials' processes too, to run the path)
        for launcher in self.launchers:
            launcher.prepare(device)

    def open(self, work_dir: Path) -> None:
        for launcher in self.launchers:
            launcher.open(work_dir)

    def idle(self, i: int) -> bool:
        return self.launchers[i].idle

    def start(self, i: int, config: TrialConfig, trial_dir: Path, env: dict[str, str], timeout_s: float,
              guesses: list[dict[str, str]]) -> ProcessRun:
        return self.launchers[i].start(config, trial_dir, env, timeout_s, guesses)

    def wait(self, timeout_s: float) -> None:
        wait_for_activity(self.launchers, timeout_s)
        for launcher in self.launchers:
            launcher.tick()

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def close(self) -> None:
        """Every slot's trial killed at once, then all reaped together (``slot.end_all``)."""
        end_all(self.launchers)
