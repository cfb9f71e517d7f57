"""``bench/walk.py``: the figures of a walk through the files, on walks and call trees written out by
hand, and one real traced run of ``orchestrate SPEC`` on this checkout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
TOP = {"cli", "outcome"}


def _walk_module() -> Any:
    return bench_module("walk")


@pytest.mark.parametrize("path, expected", [
    ("orchestrator/sweep/loop.py", ("sweep", "wing")),
    ("orchestrator/launch/slot.py", ("launch", "wing")),
    ("orchestrator/outcome.py", ("top", "top")),
    ("orchestrator/sweep.py", ("sweep", "flat")),   # the flat layout's module: a wing of its own
    ("orchestrator/planner.py", ("planner", "flat")),
])
def test_wing_of(path: str, expected: tuple[str, str]) -> None:
    assert _walk_module().wing_of(path, TOP) == expected


def _o(*names: str) -> list[str]:
    return [f"orchestrator/{n}.py" for n in names]


def test_figures_of_a_walk_in_wings() -> None:
    walk = _o("cli", "sweep/run", "store/study", "sweep/run", "sweep/loop", "outcome", "sweep/loop", "sweep/run",
              "cli")
    f = _walk_module().figures(walk, TOP)
    assert (f["files"], f["transitions"], f["edges"]) == (5, 8, 8)
    assert f["returns"] == 4  # into run (twice), loop and cli, each left before
    # out of a wing: run -> study, study -> run, loop -> outcome, run -> cli; from top (cli, outcome) none
    assert (f["climbs"], f["climbs_to_top"]) == (4, 2)
    assert f["by_wing"] == {"top": 2, "sweep": 2, "store": 1}


def test_the_same_walk_in_a_flat_house_climbs_more() -> None:
    walk = _o("cli", "run", "study", "run", "sweep", "outcome", "sweep", "run", "cli")
    f = _walk_module().figures(walk, TOP)
    assert (f["files"], f["transitions"], f["returns"]) == (5, 8, 4)
    assert (f["climbs"], f["climbs_to_top"]) == (6, 2)  # run -> sweep and sweep -> run leave a wing too
    assert f["by_wing"] == {"top": 2, "flat (each its own wing)": 3}


def test_the_folded_walk_reads_a_loop_s_body_once() -> None:
    nodes = [["orchestrator/outcome.py", "classify:1", []],
             ["orchestrator/sweep/loop.py", "poll:1", [0]],
             ["orchestrator/sweep/loop.py", "poll:1", []],
             ["orchestrator/sweep/run.py", "run:1", [1, 2, 1, 2, 1]]]
    walk = _walk_module().folded_walk(nodes, [3])
    # run polls five times: two distinct subtrees (with and without the call into outcome) are walked
    assert walk == _o("sweep/run", "sweep/loop", "outcome", "sweep/loop", "sweep/run", "sweep/loop", "sweep/run")


def test_a_real_walk_of_this_checkout(tmp_path: Path) -> None:
    out = tmp_path / "walk.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "walk.py"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = re.search(r"round 1: folded: (\d+) files, (\d+) transitions, (\d+) returns, (\d+) climbs", proc.stdout)
    assert line, proc.stdout
    files, transitions, returns, climbs = map(int, line.groups())
    assert 20 <= files <= transitions and returns < transitions and 0 < climbs < transitions
    import json

    walk = json.loads(out.read_text())[str(ROOT)]["folded_walk"]
    assert walk[0] == walk[-1] == "orchestrator/cli.py"
    for path in ("orchestrator/sweep/run.py", "orchestrator/sweep/loop.py", "orchestrator/sweep/job.py",
                 "orchestrator/search/proposer.py", "orchestrator/launch/trial.py", "orchestrator/store/records.py",
                 "orchestrator/protocol.py", "orchestrator/report/closing.py"):
        assert path in walk, path
