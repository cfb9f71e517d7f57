"""``bench/concurrency.py``: what ran beside each timed window of a several-GPU sweep, read from
trial folders and the command's timeline (issue #41 item 3). Synthetic folders: no GPU needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import bench_module


@pytest.fixture(scope="module")
def concurrency() -> Any:
    return bench_module("concurrency")


def write_trial(work: Path, number: int, **marks: float) -> None:
    folder = work / "mlruns" / ".trials" / "s-1234" / f"trial-{number:04d}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"status": "ok", "metrics": {"samples_per_s": 1.0},
                                                    "timeline": marks}))


def test_a_window_is_told_what_the_other_slots_did_beside_it(tmp_path: Path, concurrency: Any) -> None:
    # trial 0 (slot a): window 10-12; trial 1 (slot b): prepared 9.5-10.5, set up 10.5-11, window
    # 11-11.5, exited 11.6-11.8; trial 2 (slot a, same slot): ignored
    write_trial(tmp_path, 0, forked=5.0, config_received=5.0, warmup_done=9.0, window_start=10.0,
                window_end=12.0, result_written=12.1)
    write_trial(tmp_path, 1, forked=9.5, prepared=10.5, config_received=10.5, warmup_done=11.0,
                window_start=11.0, window_end=11.5, result_written=11.6)
    write_trial(tmp_path, 2, forked=12.0, config_received=12.0, warmup_done=12.5, window_start=13.0,
                window_end=14.0, result_written=14.1)
    events = [{"t": 9.0, "cpu": 1.0, "event": "told", "trial": 9}, {"t": 11.8, "event": "exited", "trial": 1, "cpu": 1.5},
              {"t": 13.0, "cpu": 3.0, "event": "ask_end"}]
    got = concurrency.beside(tmp_path, events, {0: "cuda:0", 1: "cuda:1", 2: "cuda:0"})
    first = got[0]
    assert first["window_s"] == pytest.approx(2.0) and first["slot"] == "cuda:0"
    assert first["prepare"] == pytest.approx(0.5)  # 10-10.5
    assert first["set-up"] == pytest.approx(0.5)  # 10.5-11
    assert first["exit"] == pytest.approx(0.2)  # 11.6-11.8
    assert first["windows"] == pytest.approx(0.25)  # 0.5 s of another window over 2 s
    assert first["orchestrator_cores"] == pytest.approx(2.0 / 4.0)  # 2 CPU-s from 9 s to 13 s
    lines = concurrency.report([{"label": "batch_size=8", "ratio": 0.91, "beside": first},
                                {"label": "batch_size=64", "ratio": 1.0, "beside": got[2]}])
    assert "batch_size=8" in lines[2] and "0.910" in lines[2]  # the slowest first
    assert any("beside another slot's set-up" in ln and "1 windows" in ln and "1 below" in ln for ln in lines)


def test_the_first_trial_of_each_slot_and_the_command_s_end(concurrency: Any) -> None:
    """Trial 3 has no slot recorded (the verdict ended it, in a study from before trials it ended
    recorded theirs): not counted as a slot's first trial (a 4-GPU round printed "? 18.92")."""
    events = [{"t": -3.0, "event": "process_start"}, {"t": -0.5, "event": "imports_done"},
              {"t": 1.0, "event": "loop_start"}, {"t": 1.2, "event": "start", "trial": 0},
              {"t": 1.5, "event": "start", "trial": 1}, {"t": 5.0, "event": "start", "trial": 2},
              {"t": 8.0, "event": "told", "trial": 2}, {"t": 8.1, "event": "trials_stopped"},
              {"t": 8.15, "event": "loop_end"}, {"t": 8.3, "event": "stores_closed"},
              {"t": 8.4, "event": "exit"}, {"t": 7.0, "event": "start", "trial": 3}]
    lines = concurrency.start_and_end(events, {0: "cuda:0", 1: "cuda:1", 2: "cuda:0", 3: "?"})
    assert lines[0] == "first trial per slot, s after the loop began: cuda:0 0.20, cuda:1 0.50 (spread 0.30 s)"
    assert lines[1] == ("after the last result, s: trials in flight stopped 0.10, loop ended 0.15, stores closed 0.30, "
                        "command's end 0.40")  # no summary_printed mark: left out
    assert lines[2] == "before the loop, s after the command's process began: imports_done 2.50, loop_start 4.00"
