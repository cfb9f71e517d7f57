"""bench/scale.py: the real sweep loop replayed with several concurrent slots on a simulated clock."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import bench_module

import orchestrator.replay.strategies as replay
from orchestrator.replay.landscape import load_landscape
from orchestrator.search.space import config_key

ROOT = Path(__file__).resolve().parents[2]

# 4 batch sizes x 2 precisions (tests/replay/test_replay.py's table); float32 runs out of memory from
# batch 64, bfloat16 at 128; the best, 64/bfloat16 (260/s), is alone in the 2% band.
SMALL = """\
batch_size,dtype,status,samples_per_s,peak_memory_gib,duration_s
16,float32,ok,100.0,1.0,2.0
16,bfloat16,ok,150.0,0.8,2.5
32,float32,ok,120.0,1.9,3.0
32,bfloat16,ok,210.0,1.5,3.5
64,float32,oom,,,1.0
64,bfloat16,ok,260.0,2.9,4.0
128,float32,oom,,,1.25
128,bfloat16,oom,,,1.5
"""


def load_scale() -> Any:
    return bench_module("scale")


class SpyRunner(replay.ReplayRunner):
    """The replay runner, noting at every start how many trials are still running on the clock."""

    starts: list[tuple[float, int, int, dict[str, Any]]] = []

    def start(self, i, config, *args, **kwargs):  # noqa: ANN001, ANN201
        assert self.idle(i), f"slot {i} started while its trial was running"
        running = sum(not r.exited for j, r in self.running.items() if j != i)
        SpyRunner.starts.append((self.clock, i, running + 1, dict(config.params)))  # a TrialConfig
        return super().start(i, config, *args, **kwargs)


@pytest.fixture
def small(tmp_path: Path) -> Any:
    path = tmp_path / "small.csv"
    path.write_text(SMALL)
    return load_landscape(path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slots_run_side_by_side_and_never_waste_a_measurement(small: Any, seed: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load_scale()
    monkeypatch.setattr(replay, "ReplayRunner", SpyRunner)
    results = {}
    for slots in (1, 4):
        SpyRunner.starts = []
        r = scale.replay_scaled(small, slots, seed)
        starts = SpyRunner.starts
        # never more than N in flight on the simulated clock, as the runner saw it and as the records say
        assert max(n for _, _, n, _ in starts) <= slots and r.max_in_flight <= slots
        # and N really are in flight: the first N trials all start at time 0, on N different slots
        assert [(t, i) for t, i, _, _ in starts[:slots]] == [(0.0, i) for i in range(slots)]
        assert r.max_in_flight == slots
        # no configuration measured twice, and every one has a result at the end
        keys = [config_key({k: p[k] for k in small.columns}) for _, _, _, p in starts]
        assert len(keys) == len(set(keys)) == r.measured and r.duplicates == 0
        assert r.unresolved == 0 and r.measured + r.skipped == len(small.rows)
        assert r.band_s is not None and r.measured_to_band is not None
        results[slots] = r
    one, four = results[1], results[4]
    # one slot: trials back to back, so the study takes exactly the measured trials' durations
    assert one.complete_s == pytest.approx(one.busy_s)
    # four slots complete no later than one, and no sooner than the work allows
    assert four.complete_s <= one.complete_s
    assert four.complete_s >= max(four.busy_s / 4, max(r.duration_s for r in small.rows.values())) - 1e-9
    assert four.band_s <= four.complete_s and one.band_s <= one.complete_s


def test_the_script_prints_the_table_and_a_verdict_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    scale = load_scale()
    assert scale.main(["--landscape", "bert_base_h200_cap015", "--seeds", "2", "--slots", "8"]) == 0
    out = capsys.readouterr().out
    assert "== bert_base_h200_cap015.csv: 36 configurations" in out
    assert re.search(r"\n\s+1 +[\d.]+ s +1\.000 ", out) and re.search(r"\n\s+8 +[\d.]+ s +[\d.]+ ", out)
    assert re.search(r"bert_base_h200_cap015\.csv: 8 slots: time to 2% band = [\d.]+ x one slot "
                     r"\(target <= 0\.25x\): (PASS|FAIL)", out)
