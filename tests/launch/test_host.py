"""The window gate (``orchestrator/launch/host.py``) over stand-in slots: what counts as importing
and as waiting to start. The real processes: ``test_launch.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from orchestrator.launch.host import Host


def process(ready: bool, returncode: int | None = None) -> Any:
    return SimpleNamespace(ready=ready, at_window=False, returncode=returncode)


@dataclass
class Slot:
    spares: list[Any] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)
    running: Any = None
    prepared: list[Any] = field(default_factory=list)
    prepare_pending: bool = False
    driver_only: bool = False
    """Its prepared process starts only the driver (``SlotLauncher.gated``: not gated)."""

    @property
    def gated(self) -> list[Any]:
        return [] if self.driver_only else self.prepared


def test_a_process_being_prepared_for_a_slot_s_next_trial_holds_every_window_of_the_host() -> None:
    host, a, b = Host(), Slot(spares=[process(True)]), Slot(spares=[process(True)])
    host.launchers += [a, b]
    assert not host.importing() and not host.pending()
    b.prepare_pending = True  # planned, not started: started only once no window runs
    assert host.pending() and not host.importing()
    b.prepare_pending, b.prepared = False, [process(False)]  # forked, initialising its device
    assert host.importing()
    b.prepared = [process(True)]  # ready, idle on its pipe: windows may open
    assert not host.importing()
    b.prepared = [process(False, returncode=-9)]  # died preparing: nothing to wait for
    assert not host.importing()
    b.prepared, b.driver_only = [process(False)], True  # beside its slot's trial: the driver alone
    assert not host.importing()
