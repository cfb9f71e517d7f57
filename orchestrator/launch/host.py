"""The window gate: no import beside a timed window, on any slot of the host. Never imports torch.

A trial stops before its timed window (it says so on its status pipe) until no pre-started
interpreter of the host is importing and none is waiting to start, then gets ``go``; new
interpreters start only while no window runs. A process prepared for a slot's next trial (forked,
its device initialised ahead: ``SparePool.prepare_next``) counts as one importing until it is ready:
on CUDA it creates a context, work no window should share; one that initialises only the driver
(``SparePool.prepare_driver``, several CUDA slots) does not count. Measured on a 2-GPU H200 host
with imports allowed during windows: launch-bound trials (BERT-base, batch 16-64, fp16/bf16) lost
up to 40% of their throughput, on one GPU as on two; GPU-bound ones nothing.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from orchestrator.launch.process import TrialProcess
from orchestrator.launch.trial import ProcessRun


class HostSlot(Protocol):
    """What the gate reads of one slot (a ``SlotLauncher``)."""

    @property
    def spares(self) -> Sequence[TrialProcess]:
        """Its pre-started processes."""

    @property
    def pending(self) -> list[dict[str, str]]:
        """Environments of interpreters it will start once no window runs on the host."""

    @property
    def running(self) -> ProcessRun | None:
        """Its current (or last) trial."""

    @property
    def prepared(self) -> Sequence[TrialProcess]:
        """The process prepared for its next trial (forked, its device being initialised), if any."""

    @property
    def gated(self) -> Sequence[TrialProcess]:
        """Of ``prepared``, the one that makes its device's context (not only the driver's start)."""

    @property
    def prepare_pending(self) -> bool:
        """A process for its next trial is to be prepared once no window runs on the host."""


class Host:
    """The slots of one orchestrator together (see the module's rule on imports and windows)."""

    def __init__(self) -> None:
        self.launchers: list[HostSlot] = []

    def importing(self) -> bool:
        """Some interpreter of the host is still starting (a spare, or a trial's fresh process)."""
        procs = [s for launcher in self.launchers for s in [*launcher.spares, *launcher.gated]]
        procs += [launcher.running.interp for launcher in self.launchers if launcher.running is not None]
        return any(not p.ready and not p.at_window and p.returncode is None for p in procs)

    def pending(self) -> bool:
        return any(launcher.pending or launcher.prepare_pending for launcher in self.launchers)

    def in_window(self) -> bool:
        return any(launcher.running is not None and launcher.running.in_window for launcher in self.launchers)
