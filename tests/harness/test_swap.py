"""Swap per trial (orchestrator/harness/swap.py): the parsers, the real counters of this Linux
machine (it has no swap: real zeros, not missing values), real trials' figures, and the
``swapped`` decision on recorded counter sequences from macOS and Linux (contract tests)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fixtures import swap_counters as rec
from orchestrator import metrics as M
from orchestrator.harness import swap
from orchestrator.protocol import config_of
from orchestrator.harness.swap import GIB, SwapSample

LINUX = os.path.exists("/proc/vmstat")
MIB = 1024 ** 2


# -- the parsers, on each OS's text ----------------------------------------------------------------

@pytest.mark.parametrize("text, page, expected", [
    (rec.LINUX_4_19_VMSTAT, 4096, (2605828 * 4096, 345219 * 4096)),
    ("pswpin 0\npswpout 0\n", 4096, (0, 0)),  # a machine without swap: zeros, not None
    ("pgfault 1\n", 4096, (None, None)),  # a kernel without the counters
])
def test_parse_proc_vmstat(text: str, page: int, expected: tuple) -> None:
    assert swap.parse_proc_vmstat(text, page) == expected


@pytest.mark.parametrize("text, expected", [
    (rec.LINUX_MEMINFO_SWAP, (80 * 1024, 524280 * 1024)),
    ("SwapTotal:             0 kB\nSwapFree:              0 kB\n", (0, 0)),
    ("MemTotal: 1 kB\n", (None, None)),
])
def test_parse_meminfo(text: str, expected: tuple) -> None:
    assert swap.parse_meminfo(text) == expected


@pytest.mark.parametrize("text, expected", [
    (rec.split_mac(rec.MAC_MINI_BEFORE)[1], (3028624 * 16384, 1024615 * 16384)),
    (rec.INTEL_MAC_VM_STAT, (0, 0)),  # 4 KiB pages on Intel: read from the header
    (rec.VM_STAT_WITHOUT_SWAPINS, (0, None)),  # a line that is not there is not a zero
])
def test_parse_vm_stat(text: str, expected: tuple) -> None:
    assert swap.parse_vm_stat(text) == expected


@pytest.mark.parametrize("text, expected", [
    (rec.split_mac(rec.MAC_MINI_BEFORE)[0], (round(9689.94 * MIB), round(10240.00 * MIB))),
    ("vm.swapusage: total = 0.00M  used = 0.00M  free = 0.00M  (encrypted)", (0, 0)),
    ("vm.swapusage: total = 1.50G  used = 512.00K  free = 1.50G", (512 * 1024, round(1.5 * GIB))),
    ("", (None, None)),
])
def test_parse_swapusage(text: str, expected: tuple) -> None:
    used, total = swap.parse_swapusage(text)
    if expected[0] is None:
        assert used is None and total is None
    else:
        assert used == pytest.approx(expected[0], abs=1) and total == pytest.approx(expected[1], abs=1)


# -- the real counters here ----------------------------------------------------------------------

def _proc_counter(name: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, value = line.split()
        if key == name:
            return int(value)
    raise AssertionError(f"{name} not in /proc/vmstat")


def _no_swap_device() -> bool:
    return len(Path("/proc/swaps").read_text().strip().splitlines()) == 1  # the header only


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_real_linux_counters_are_read_and_are_real_numbers() -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    before_out = _proc_counter("pswpout")
    sample = swap.read_swap()
    after_out = _proc_counter("pswpout")
    assert all(isinstance(v, int) for v in (sample.out_bytes, sample.in_bytes, sample.used_bytes, sample.total_bytes))
    assert before_out * page <= sample.out_bytes <= after_out * page
    total_kib = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines()
                         if ln.startswith("SwapTotal:")).split()[1])
    assert sample.total_bytes == total_kib * 1024
    if _no_swap_device():  # this machine: no swap configured, so nothing in use, all zeros
        assert sample.total_bytes == 0 and sample.used_bytes == 0
    else:
        assert sample.total_bytes > 0 and 0 <= sample.used_bytes <= sample.total_bytes


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_real_trial_records_its_swap_figures_as_zeros_not_missing() -> None:
    from orchestrator.harness import train

    config = {"experiment": "experiments.mlp", "not_applied": {},
              "params": {"device": "cpu", "batch_size": 64, "hidden_size": 64, "num_layers": 1},
              "trial": {"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.0}}
    out = train.run(config_of(config), train.Progress())
    figures = {k: out["metrics"][k] for k in M.SWAP_METRICS}
    assert all(isinstance(v, float) for v in figures.values()), figures
    assert "status" not in out  # a trial that did not swap is an ordinary ok
    if _no_swap_device():
        assert set(figures.values()) == {0.0}


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_real_trial_process_writes_the_figures_to_its_result(tmp_path: Path) -> None:
    from orchestrator.launch import launch_trial

    config = {"experiment": "experiments.mlp", "not_applied": {}, "allow_swap": False,
              "params": {"device": "cpu", "batch_size": 64, "hidden_size": 64, "num_layers": 1},
              "trial": {"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.0}}
    launched = launch_trial(config_of(config), tmp_path / "t", {}, 120)
    assert launched.outcome.status == "ok", launched.outcome.detail
    result = json.loads((tmp_path / "t" / "result.json").read_text())
    assert set(M.SWAP_METRICS) <= set(result["metrics"])
    if _no_swap_device():
        assert all(result["metrics"][k] == 0.0 for k in M.SWAP_METRICS)


# -- the decision: a table ----------------------------------------------------------------------

T = swap.SWAP_THRESHOLD_GIB


def figures(out: float | None = 0.0, inn: float | None = 0.0, warm_out: float | None = 0.0) -> dict[str, Any]:
    return {M.SWAP_OUT_GIB: out, M.SWAP_IN_GIB: inn, M.WARMUP_SWAP_OUT_GIB: warm_out, M.WARMUP_SWAP_IN_GIB: 0.0,
            M.SWAP_USED_GIB: 0.0, M.SWAP_USED_BEFORE_GIB: 0.0}


@pytest.mark.parametrize("f, expected", [
    (figures(), False),                                   # nothing moved
    (figures(out=T), True),                               # the threshold itself counts (inclusive)
    (figures(out=T * 0.99), False),                       # just below it: noise
    (figures(out=2.19), True),                            # GiBs per window: a batch that does not fit
    (figures(inn=5.0), False),                            # swap-ins alone: maybe another program's pages
    (figures(inn=5.0, warm_out=1.0), True),               # the trial pushed pages out, then read them back
    (figures(inn=5.0, warm_out=T * 0.5), False),
    (figures(warm_out=3.0), False),                       # warm-up only: the window ran at full speed
    (figures(out=None, inn=None, warm_out=None), False),  # no counters on this OS: no verdict
])
def test_swapped_decision(f: dict[str, Any], expected: bool) -> None:
    assert swap.swapped(f) is expected


def test_threshold_is_64_mib() -> None:
    assert swap.SWAP_THRESHOLD_GIB * 1024 == 64


# -- recorded sequences (contract tests: macOS counters and a swapping Linux cannot exist here) ---

def mac_sample(text: str) -> SwapSample:
    usage, vm = rec.split_mac(text)
    out, inn = swap.parse_vm_stat(vm)
    used, total = swap.parse_swapusage(usage)
    return SwapSample(out, inn, used, total)


@pytest.mark.contract
def test_contract_recorded_macos_window_that_swapped() -> None:
    """The Mac mini's readings as a trial's window: GiBs moved, so the trial is ``swapped``; the
    9.5 GiB of swap in use before it are reported, not blamed."""
    before, after = mac_sample(rec.MAC_MINI_BEFORE), mac_sample(rec.MAC_MINI_AFTER)
    f = swap.swap_figures(start=before, warmup_end=before, window_start=before, window_end=after)
    assert f[M.SWAP_OUT_GIB] == pytest.approx(143204 * 16384 / GIB)  # 2.19 GiB
    assert f[M.SWAP_IN_GIB] == pytest.approx(700444 * 16384 / GIB)  # 10.69 GiB
    assert f[M.WARMUP_SWAP_OUT_GIB] == 0.0
    assert f[M.SWAP_USED_BEFORE_GIB] == pytest.approx(9689.94 / 1024, abs=1e-6)
    assert f[M.SWAP_USED_GIB] == pytest.approx(554.62 / 1024, abs=1e-6)
    assert swap.swapped(f)
    assert swap.describe(f, 8.0) == ("fits but swaps: 2.19 GiB swapped out, 10.69 GiB in during the timed window, "
                                     "at 8.0 samples/s (warm-up: 0.00 out, 0.00 in; swap in use 0.54 GiB at the end, "
                                     "9.46 GiB before the trial)")
    assert swap.describe({}).startswith("fits but swaps: ? GiB swapped out, ? GiB in during the timed window (")


@pytest.mark.contract
def test_contract_recorded_macos_swap_before_the_trial_is_not_blamed() -> None:
    """The same Mac after the burst: 0.54 GiB in use, counters still. A trial that starts there
    and moves nothing is not swapped, whatever is in use."""
    after = mac_sample(rec.MAC_MINI_AFTER)
    f = swap.swap_figures(after, after, after, after)
    assert f[M.SWAP_USED_BEFORE_GIB] > 0.5 and f[M.SWAP_OUT_GIB] == 0.0 and f[M.SWAP_IN_GIB] == 0.0
    assert not swap.swapped(f)


@pytest.mark.contract
def test_contract_recorded_macos_burst_during_warmup_only() -> None:
    """The burst during warm-up, a still window: the window's throughput is real; not swapped."""
    before, after = mac_sample(rec.MAC_MINI_BEFORE), mac_sample(rec.MAC_MINI_AFTER)
    f = swap.swap_figures(start=before, warmup_end=after, window_start=after, window_end=after)
    assert f[M.WARMUP_SWAP_OUT_GIB] == pytest.approx(2.185, abs=1e-3) and f[M.SWAP_OUT_GIB] == 0.0
    assert not swap.swapped(f)


@pytest.mark.contract
def test_contract_linux_sequence_from_a_recorded_reading() -> None:
    """Linux: the recorded 4.19 reading (2.6 M pages swapped out since boot, from long before the
    trial) as the start, plus a CONSTRUCTED 256 MiB swapped out during the window."""
    out0, in0 = swap.parse_proc_vmstat(rec.LINUX_4_19_VMSTAT, 4096)
    used, total = swap.parse_meminfo(rec.LINUX_MEMINFO_SWAP)
    start = SwapSample(out0, in0, used, total)
    delta = rec.LINUX_SWAP_DELTA_PAGES_CONSTRUCTED * 4096
    end = SwapSample(out0 + delta, in0, used + delta, total)
    quiet = swap.swap_figures(start, start, start, start)
    assert quiet[M.SWAP_OUT_GIB] == 0.0 and not swap.swapped(quiet)  # 9.9 GiB since boot: not this trial's
    f = swap.swap_figures(start, start, start, end)
    assert f[M.SWAP_OUT_GIB] == 0.25 and swap.swapped(f)


@pytest.mark.contract
def test_contract_macos_reading_runs_vm_stat_and_sysctl(monkeypatch: pytest.MonkeyPatch) -> None:
    usage, vm = rec.split_mac(rec.MAC_MINI_BEFORE)
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout={"vm_stat": vm, "sysctl": usage + "\n"}[argv[0]])

    monkeypatch.setattr(swap.sys, "platform", "darwin")
    monkeypatch.setattr(swap.subprocess, "run", fake_run)
    sample = swap.read_swap()
    assert calls == [["vm_stat"], ["sysctl", "vm.swapusage"]]
    assert sample == mac_sample(rec.MAC_MINI_BEFORE)


@pytest.mark.contract
def test_contract_a_trial_that_swapped_returns_status_swapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real CPU trial whose four readings are the Mac mini's (start, end of warm-up, window start:
    before; window end: after): ``swapped`` with the figures in its detail, its metrics kept; with
    ``allow_swap`` an ordinary result with the same figures."""
    from orchestrator.harness import train

    readings = [mac_sample(rec.MAC_MINI_BEFORE)] * 3 + [mac_sample(rec.MAC_MINI_AFTER)]
    config = {"experiment": "experiments.mlp", "not_applied": {},
              "params": {"device": "cpu", "batch_size": 32, "hidden_size": 32, "num_layers": 1},
              "trial": {"warmup_steps": 1, "measure_steps": 2, "min_measure_s": 0.0}}
    for allow in (False, True):
        queue = list(readings)
        monkeypatch.setattr(swap, "read_swap", lambda: queue.pop(0))
        out = train.run(config_of({**config, "allow_swap": allow}), train.Progress())
        assert not queue  # read exactly four times
        assert out["metrics"][M.SWAP_OUT_GIB] == pytest.approx(2.185, abs=1e-3)
        assert out["metrics"][M.SAMPLES_PER_S] > 0
        if allow:
            assert "status" not in out and "detail" not in out
        else:
            assert out["status"] == "swapped"
            assert out["detail"].startswith("fits but swaps: 2.19 GiB swapped out, 10.69 GiB in during the timed "
                                            f"window, at {out['metrics'][M.SAMPLES_PER_S]:,.1f} samples/s (")
