"""bench/cluster.py: several real orchestrators on one PostgreSQL study, their connections and the
study lock. The long run (16 orchestrators, 200 configurations) is the benchmark; here 3 on 12."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]


def load_cluster() -> Any:
    return bench_module("cluster")


@pytest.mark.slow
def test_three_orchestrators_measure_each_configuration_once_within_their_connection_bounds(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cluster.py"), "--orchestrators", "3",
                           "--trials", "12", "--keep", str(tmp_path / "runs"), "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    f = json.loads(out.read_text())
    assert f["exit_codes"] == [0, 0, 0]
    assert f["study"]["configurations"] == 12 and f["study"]["measured"] == 12
    assert not f["study"]["measured_twice"] and not f["study"]["unfinished"]
    c = f["connections"]
    assert 1 <= c["study_most_per_orchestrator"] <= c["study_bound"]  # seen at all, and within the bound
    assert 1 <= c["mlflow_most_per_orchestrator"] <= c["mlflow_bound"]
    assert f["lock"]["proposals"] >= 12  # every measured trial was asked for under the lock
    assert 0 < f["lock"]["held_median_s"] < 5
    assert "PASS  every configuration measured exactly once" in done.stdout


def test_the_lock_figures_count_only_holds_that_asked_for_a_trial(tmp_path: Path) -> None:
    cluster = load_cluster()
    events = [("lock_wait", 0.0), ("lock_held", 0.5), ("lock_released", 0.6),  # start-up hold: no ask
              ("lock_wait", 1.0), ("lock_held", 1.1), ("ask_end", 1.2), ("lock_released", 1.3),
              ("lock_wait", 2.0), ("lock_held", 2.3), ("ask_end", 2.4), ("lock_released", 2.5)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps({"t": t, "event": e, "trial": None}) + "\n" for e, t in events))
    figures = cluster.lock_figures([path, tmp_path / "absent.jsonl"], wall=10.0, trial_s=2.0)
    assert figures["proposals"] == 2
    assert figures["held_median_s"] == pytest.approx(0.2)
    assert figures["waited_median_s"] == pytest.approx(0.2)  # 0.1 and 0.3
    assert figures["held_share_of_wall"] == pytest.approx(0.5 / 10)
    assert figures["orchestrators_at_limit"] == pytest.approx(10.0)


def test_the_verdicts_fail_on_a_repeat_a_leftover_or_too_many_connections() -> None:
    cluster = load_cluster()
    good = {"sampler": "grid", "configurations": 3, "exit_codes": [0, 0],
            "study": {"measured_twice": [], "unfinished": [], "missing": [], "configurations": 3},
            "connections": {"study_most_per_orchestrator": 3, "study_bound": 5,
                            "mlflow_most_per_orchestrator": 2, "mlflow_bound": 3}}
    assert all(passed for _, passed in cluster.verdicts(good))
    broken = [{**good, "exit_codes": [0, 75]},
              {**good, "study": {**good["study"], "measured_twice": [12]}},
              {**good, "study": {**good["study"], "unfinished": [7]}},
              {**good, "study": {**good["study"], "missing": [9], "configurations": 2}},
              {**good, "connections": {**good["connections"], "study_most_per_orchestrator": 6}},
              {**good, "connections": {**good["connections"], "mlflow_most_per_orchestrator": 4}}]
    for f in broken:
        assert [label for label, passed in cluster.verdicts(f) if not passed], f
