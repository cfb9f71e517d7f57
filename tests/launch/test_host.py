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
    pinned: bool = False


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


def test_a_slot_on_cores_of_its_own_prepares_without_holding_the_other_windows() -> None:
    """Several GPUs, each slot pinned to its own cores: a prepared process initialising its device
    holds no window (on 4 x H100 the GPU-bound windows beside such work measured 0.997-1.003 of one GPU's)."""
    host, a, b = Host(), Slot(spares=[process(True)], pinned=True), Slot(spares=[process(True)], pinned=True)
    host.launchers += [a, b]
    b.prepared = [process(False)]
    assert not host.importing()
    b.spares = [process(False)]  # an interpreter importing still does
    assert host.importing()


def test_a_pinned_slot_prepares_its_next_process_while_another_slot_measures(tmp_path: Any) -> None:
    """``SlotLauncher.tick``: with a window open on the host, a slot on cores of its own forks its
    next trial's process at once; one that shares the CPU waits for the window to close."""
    from orchestrator.launch.slot import SlotLauncher

    measuring = Slot(running=SimpleNamespace(in_window=True))
    for cores, at_once in ((frozenset({0}), True), (None, False)):
        host = Host()
        host.launchers.append(measuring)
        launcher = SlotLauncher("experiments.mlp", {}, cores, tmp_path, None, host=host, fork=True)
        asked: list[str] = []

        def prepare_now(device: str, pool: Any = launcher.pool, asked: list[str] = asked) -> None:
            pool.prepare_pending = None
            asked.append(device)

        launcher.pool.prepare_now = prepare_now  # type: ignore[method-assign]
        launcher.pool.start_pending = lambda asked=asked: asked.append("after the window")  # type: ignore[method-assign]
        launcher.pool.prepare_pending = "cuda"
        launcher.tick()
        assert asked == (["cuda"] if at_once else []), (cores, asked)
        measuring.running.in_window = False
        launcher.tick()
        measuring.running.in_window = True
        assert asked == (["cuda"] if at_once else ["after the window"]), (cores, asked)
