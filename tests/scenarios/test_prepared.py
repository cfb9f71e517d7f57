"""A sweep whose trials run in processes prepared ahead (issue #40 item 2: on CUDA the next
trial's process makes its context while the previous one exits). The CPU has nothing to
initialise, so a sweep does not prepare there; ``ORCHESTRATE_TEST_PREPARE_CPU`` makes it, so that
the path runs here end to end: repeats, an out-of-memory trial, every result recorded once, and
no process left behind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import check_records, orchestrate, trial_processes, write_spec

pytestmark = pytest.mark.slow

SPEC = """
    name: prepared
    experiment: experiments.bert
    device: cpu
    fixed:
      model: tiny
      seq_len: 32
      cpu_memory_limit_gib: 1.0
    space:
      batch_size: [8, 16, 4096]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 3
      min_measure_s: 0.2
      repeats: 2
      timeout_s: 120
    """


def test_a_sweep_runs_its_trials_and_their_repeats_in_prepared_processes(project: Path) -> None:
    spec = write_spec(project, SPEC)
    proc = orchestrate([str(spec)], project, env={"ORCHESTRATE_TEST_PREPARE_CPU": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = check_records(project, "prepared", n_results=3)
    assert sorted(t.user_attrs["status"] for t in records["results"]) == ["ok", "ok", "oom"]
    results = [json.loads(p.read_text()) for p in (project / "mlruns" / ".trials").glob("prepared-*/trial-*/**/result.json")]
    assert len(results) == 5  # two processes for each configuration that fits, one for the OOM
    prepared = [r for r in results if "prepared" in r["timeline"]]
    assert len(prepared) >= 3, [sorted(r["timeline"]) for r in results]  # the first's at start-up, then most
    for r in prepared:
        tl = r["timeline"]
        assert tl["forked"] <= tl["prepared"] <= tl["config_received"] <= tl["device"]
    time.sleep(0.5)
    assert trial_processes(str(project / "mlruns"), "orchestrator.harness") == [], "a process was left behind"
