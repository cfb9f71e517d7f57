"""The benchmark scripts still run and print what the README quotes (few seeds: a smoke test,
not the figures, which come from the full runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.replay import load_landscape

ROOT = Path(__file__).resolve().parents[1]
LANDSCAPES = sorted((ROOT / "bench" / "landscapes").glob("*.csv"))


def test_there_are_recorded_landscapes() -> None:
    assert {p.name for p in LANDSCAPES} >= {"bert_base_h200_cap015.csv", "bert_tiny_cpu_rlimit.csv",
                                            "bert_tiny_cpu_rlimit_r3.csv"}


@pytest.mark.parametrize("path", LANDSCAPES, ids=lambda p: p.name)
def test_each_landscape_is_a_full_grid_with_a_feasible_best(path: Path) -> None:
    land = load_landscape(path)
    sizes = [len(land.values(c)) for c in land.columns]
    assert len(land.rows) == __import__("math").prod(sizes)   # every configuration, once
    assert land.best_feasible() > 0
    assert any(r.status == "oom" for r in land.rows.values())  # the memory limit was reached


def test_search_efficiency_runs_and_reports_every_strategy_and_target() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "search_efficiency.py"), "--seeds", "3",
                           str(ROOT / "bench" / "landscapes" / "bert_base_h200_cap015.csv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for strategy in ("grid", "random", "tpe", "tpe+skip", "tpe+skip, no nbr", "lightning"):
        assert f"\n   {strategy} " in out, strategy
    assert "medians over 3 seeds (0-2)" in out
    assert "tpe+skip median ratio" in out and "lightning's 72.5 s" in out
