"""``bench/contexts.py``: where a several-GPU sweep's trials made their CUDA context, read from
``bench/devices.py --json`` figures (issue #41). Synthetic figures, then a recorded run: no GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def contexts() -> Any:
    return bench_module("contexts")


def sweep(way: str, *trials: tuple[str, dict[str, float]]) -> dict[str, Any]:
    return {"way": way, "timeline": [{"slot": slot, "marks": marks} for slot, marks in trials]}


def test_each_context_is_counted_once_and_told_what_overlapped_it(tmp_path: Path, contexts: Any) -> None:
    one = sweep("one", ("cuda:0", {"forked": 1.0, "prepared": 1.3}), ("cuda:0", {"forked": 4.0, "prepared": 4.3}))
    several = sweep("several",
                    ("cuda:0", {"forked": 0.1, "prepared": 0.4}),       # start-up: counted, not timed
                    ("cuda:0", {"device": 2.0, "device_ready": 2.4}),   # alone
                    ("cuda:1", {"device": 5.0, "device_ready": 6.0}),   # each beside the other's
                    ("cuda:2", {"device": 5.0, "device_ready": 6.0}),
                    ("cuda:3", {"device": 10.0, "device_ready": 10.2}),  # each beside three others'
                    ("cuda:0", {"device": 10.0, "device_ready": 10.2}),
                    ("cuda:1", {"forked": 10.0, "prepared": 10.2}),
                    ("cuda:2", {"forked": 10.0, "prepared": 10.2}))
    path = tmp_path / "devices.json"
    path.write_text(json.dumps({"rounds": 1, "ways": {"cuda:0,cuda:1": {"sweeps": [one]},
                                                      "auto": {"sweeps": [one, several]}}}))
    lines = contexts.summary([path])
    assert lines[:2] == ["one, 1 sweeps: 2 trials prepared (100%), 0 made their context in the trial",
                         "  prepared after start-up: median 0.30 s, 0.6 s over 2; by other slots' contexts beside them:"]
    assert lines[3] == "several (auto), 1 sweeps: 3 trials prepared (38%), 5 made their context in the trial"
    assert lines[4].startswith("  prepared after start-up: median 0.20 s, 0.4 s over 2;")  # not the start-up's
    assert lines[5].split() == ["more", "than", "one", "other's", "2", "median", "0.20", "s"]
    assert lines[6].startswith("  in trial after start-up: median 0.40 s, 2.8 s over 5;")
    rows = {line[:28].strip(): line[28:].split() for line in lines[7:]}
    assert rows == {"alone": ["1", "median", "0.40", "s"], "up to one other's": ["2", "median", "1.00", "s"],
                    "more than one other's": ["2", "median", "0.20", "s"]}


def test_a_recorded_four_gpu_run_reads_as_its_log_says(contexts: Any) -> None:
    lines = contexts.summary([ROOT / "docs" / "gpu" / "devices41" / "x4_session52" / "devices.json"])
    assert lines[0].startswith("one, 3 sweeps: ") and "0 made their context in the trial" in lines[0]
    assert any(line.startswith("several (auto), 3 sweeps: ") for line in lines)
    assert any(line.startswith("several (cuda:0,cuda:1), 3 sweeps: ") for line in lines)
