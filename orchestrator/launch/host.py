"""The window gate: no import beside a timed window, on any slot of the host. Never imports torch.

A trial stops before its timed window (it says so on its status pipe) until no pre-started
interpreter of the host is importing and none is waiting to start, then gets ``go``; new
interpreters start only while no window runs. Measured on a 2-GPU H200 host with imports allowed
during windows: launch-bound trials (BERT-base, batch 16-64, fp16/bf16) lost up to 40% of their
throughput, on one GPU as on two; GPU-bound ones nothing.

A process prepared for a slot's next trial (forked, its device initialised ahead:
``SparePool.prepare_next``) counts as one importing until it is ready, and starts only while no
window runs, where the slots share the CPU. Where each slot has cores of its own (several GPUs,
each pinned: ``slots.gpu_cores``), it starts at once and holds no window. Gated, on 4 x H100 some
window was nearly always open: 5 of 16 and 6 of 21 trials of a four-GPU headline were prepared,
and the others made their CUDA context in their own set-up (median 0.52 s), beside the other
slots' windows all the same. Ungated, 18 of 18 were prepared (set-up median 0.07 s, a trial 3.20 s
against 3.57-3.68 s), and the other windows measured 0.997-1.003 of one GPU's throughput
(2026-11-27, ``docs/gpu/devices41/gate/``).
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
    def prepare_pending(self) -> bool:
        """A process for its next trial is to be prepared once no window runs on the host."""

    @property
    def pinned(self) -> bool:
        """Its trials run on CPU cores of their own: its prepared process is not gated."""


class Host:
    """The slots of one orchestrator together (see the module's rule on imports and windows)."""

    def __init__(self) -> None:
        self.launchers: list[HostSlot] = []

    def importing(self) -> bool:
        """Some interpreter of the host is still starting (a spare, or a trial's fresh process)."""
        procs = [s for launcher in self.launchers
                 for s in [*launcher.spares, *([] if launcher.pinned else launcher.prepared)]]
        procs += [launcher.running.interp for launcher in self.launchers if launcher.running is not None]
        return any(not p.ready and not p.at_window and p.returncode is None for p in procs)

    def pending(self) -> bool:
        return any(launcher.pending or launcher.prepare_pending for launcher in self.launchers)

    def in_window(self) -> bool:
        return any(launcher.running is not None and launcher.running.in_window for launcher in self.launchers)
