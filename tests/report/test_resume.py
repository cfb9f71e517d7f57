"""A finished study's command run again: its summary, with no torch, no MLflow, no Optuna and no
probe; and the whole way (probe and all) when there is something to run or the machine changed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import orchestrate, write_spec

pytestmark = pytest.mark.slow


@pytest.fixture
def project(seeded_project: Path) -> Path:
    """The project folder, its MLflow store already created (``conftest.seed_mlflow``): these
    tests are about what happens after a project's first run is set up."""
    return seeded_project


SPEC = """
    name: again
    experiment: experiments.faults
    device: cpu
    fixed: {batch_size: 8}
    space:
      hidden_size: [8, 16, 24]
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60}
    """
MODULES = ("import sys; from orchestrator.cli import main; code = main(sys.argv[1:]); "
           "print('MODULES', code, ' '.join(sorted({m.split('.')[0] for m in sys.modules} "
           "& {'torch', 'mlflow', 'optuna'})), file=sys.stderr)")


def run_counting_modules(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str], list[str]]:
    """The command in a fresh interpreter: what it printed, what it imported, and the events its
    timeline recorded (``probe_start`` once a probe is started)."""
    events = project / "events.jsonl"
    events.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", MODULES, *args], cwd=project, capture_output=True, text=True,
                          timeout=180, env={**__import__("os").environ, "ORCHESTRATE_TIMELINE": str(events)})
    tag, code, *modules = proc.stderr.strip().splitlines()[-1].split(" ")
    assert tag == "MODULES", proc.stderr
    names = [json.loads(line)["event"] for line in events.read_text().splitlines()] if events.exists() else []
    return proc, modules, names


def test_a_finished_study_answers_without_torch_or_a_probe(project: Path) -> None:
    spec = write_spec(project, SPEC)
    first = orchestrate([str(spec)], project)
    assert first.returncode == 0, first.stderr
    proc, modules, events = run_counting_modules(project, str(spec))
    assert proc.returncode == 0, proc.stderr
    assert modules == [] and "probe_start" not in events and "interpreter_spawn" not in events
    assert proc.stdout.startswith("orchestrate: again on cpu (as recorded with the study: nothing to run, so "
                                  "nothing was started)")
    assert proc.stdout.splitlines()[0].endswith("; 3 of 3 trials done")
    assert "again: 3 of 3 trials have a result (3 ok)" in proc.stdout and "Best configurations:" in proc.stdout
    # the same summary as the run that measured them, from "have a result" on
    tail = first.stdout[first.stdout.index("again: 3 of 3 trials have a result"):]
    assert proc.stdout.split("Best configurations:")[1] == tail.split("Best configurations:")[1]
    # --export writes the best from the study as read, still without torch, MLflow or Optuna
    exported, modules, events = run_counting_modules(project, str(spec), "--export", "best.yaml")
    assert exported.returncode == 0 and modules == [] and "probe_start" not in events, exported.stderr
    assert exported.stdout.splitlines()[-1].startswith("Best configuration written to best.yaml: again trial ")
    best = (project / "best.yaml").read_text()
    assert best.startswith("# again trial ") and "hidden_size: " in best and "batch_size: 8" in best


def test_a_changed_machine_or_a_trial_to_retry_goes_the_whole_way(project: Path) -> None:
    spec = write_spec(project, SPEC)
    assert orchestrate([str(spec)], project).returncode == 0
    db = project / "mlruns" / "optuna.db"
    con = sqlite3.connect(db)
    with con:  # the study says it was run with another torch
        (value,) = con.execute("SELECT value_json FROM study_user_attributes WHERE key = 'orchestrate.machine'").fetchone()
        machine = json.loads(value)
        machine["torch_version"] = "1.0.0"
        con.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = 'orchestrate.machine'",
                    (json.dumps(machine),))
    con.close()
    proc, modules, events = run_counting_modules(project, str(spec))
    assert proc.returncode == 0, proc.stderr
    assert "probe_start" in events and "torch" not in modules  # the probe imports torch, in its own process
    assert "3 of 3 trials done" in proc.stdout and "nothing to run" not in proc.stdout
    again, _, events = run_counting_modules(project, str(spec))  # the run recorded this machine again
    assert "nothing to run" in again.stdout and "probe_start" not in events
    retried, _, events = run_counting_modules(project, str(spec), "--retry", "ok")
    assert "probe_start" in events and "3 'ok' result(s) will run again (--retry)" in retried.stdout
