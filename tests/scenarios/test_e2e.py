"""The installed `orchestrate` command on a small real sweep, as a user runs it.

Real subprocess trials training the tiny BERT on the CPU, a real Optuna study in SQLite and a
real MLflow store in SQLite, all in a temporary project folder; checked through their own APIs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, ROOT, check_records, load_study, orchestrate, parent_runs, \
    trial_processes, write_spec

pytestmark = pytest.mark.slow

SPEC = """
    name: tiny_e2e
    experiment: experiments.bert
    device: auto
    fixed:
      model: tiny
      seq_len: 32
      cpu_memory_limit_gib: 1.0
    space:
      batch_size: [8, 16, 4096]
      dtype: [float32, bfloat16]
      mps_high_watermark_ratio: [1.0, 1.7]
    search:
      sampler: grid
    trial:
      warmup_steps: 1
      measure_steps: 3
      min_measure_s: 0.2
      timeout_s: 120
    """


def test_dry_run_prints_the_plan_and_creates_nothing(project: Path) -> None:
    spec = write_spec(project, SPEC)
    proc = orchestrate([str(spec), "--dry-run"], project)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "6 configurations" in out and "batch_size x3, dtype x2" in out
    assert "auto -> cpu" in out
    assert "not applied: mps_high_watermark_ratio" in out
    assert f"sqlite:///{project}/mlruns/optuna.db" in out and f"sqlite:///{project}/mlruns/mlflow.db" in out
    assert sorted(p.name for p in project.iterdir()) == ["spec.yaml"]


def test_shipped_bert_memory_dry_run(project: Path) -> None:
    proc = orchestrate([str(ROOT / "sweeps" / "bert_memory.yaml"), "--dry-run"], project)
    assert proc.returncode == 0, proc.stderr
    assert "54 configurations" in proc.stdout and "auto search: ends once no configuration left" in proc.stdout
    assert "40 in total" in proc.stdout
    assert ("each: 3 warm-up + at least 5 measured steps (10 unless the throughput is known within +-0.5% at 95% "
            "sooner) and 0.5 s;") in proc.stdout
    assert list(project.iterdir()) == []


def test_sweep_records_everything_and_a_second_run_resumes(project: Path) -> None:
    spec = write_spec(project, SPEC)
    events = project.parent / f"{project.name}-events.jsonl"
    proc = orchestrate([str(spec)], project, env={"ORCHESTRATE_TIMELINE": str(events)})
    assert proc.returncode == 0, proc.stderr
    records = check_records(project, "tiny_e2e", n_results=6)
    # The slot's fork server was started at start-up, before the study was opened and the first
    # trial asked for, and served all six trials (the two OOMs included): one import in all.
    timeline = [json.loads(line) for line in events.read_text().splitlines()]
    names = [e["event"] for e in timeline]
    assert names.count("interpreter_spawn") == 1, names
    assert names.index("interpreter_spawn") < names.index("ask_start") < names.index("start")
    assert names.count("start") == 6
    # ... and, forked by it, the experiment's probe (issue #29: one import of torch per start);
    # the command's marks, in order (bench/first_trial.py reads them)
    assert next(e for e in timeline if e["event"] == "probe_start").get("forked") is True
    order = ["process_start", "cli_start", "probe_start", "imports_done", "probe_answered", "smoke_answered",
             "stores_opened", "loop_start", "stores_closed", "summary_printed", "exit"]
    assert [n for n in names if n in order] == order, names
    assert names.index("told", len(names) - names[::-1].index("start")) < names.index("stores_closed")
    by_batch = {}
    for t in records["results"]:
        by_batch.setdefault(t.params["batch_size"], []).append(t.user_attrs["status"])
    assert by_batch[8] == ["ok", "ok"] and by_batch[16] == ["ok", "ok"]
    assert by_batch[4096] == ["oom", "oom"]  # a real CPU out-of-memory under the 1 GiB limit
    for t in records["results"]:
        run = records["runs"][t.number][0]
        assert run.data.params["batch_size"] == str(t.params["batch_size"])
        assert run.data.params["model"] == "tiny" and run.data.params["device"] == "cpu"
        assert run.data.tags["device"] == "cpu" and run.data.tags["torch_version"].startswith("2.")
        assert "mps_high_watermark_ratio" in run.data.tags["not_applied"]
        if t.user_attrs["status"] == "ok":
            for metric in ("samples_per_s", "tokens_per_s", "step_time_ms_p50", "step_time_ms_p90",
                           "peak_memory_gib", "loss", "throughput_cv", "duration_s"):
                assert run.data.metrics[metric] == pytest.approx(
                    t.user_attrs["metrics"].get(metric, t.user_attrs.get(metric)), rel=1e-6), metric
            assert t.values[0] == pytest.approx(run.data.metrics["samples_per_s"])
        else:
            assert "DefaultCPUAllocator" in run.data.tags["detail"]
            assert run.data.metrics["at_oom_rss_gib"] > 0
    (parent,) = parent_runs(project, "tiny_e2e")
    assert parent.info.status == "FINISHED"
    assert "Best:" in parent.data.tags["mlflow.note.content"]
    assert "mlflow ui --backend-store-uri sqlite:///" in proc.stdout and "Browse:  orchestrate ui" in proc.stdout
    assert "Best: trial" in proc.stdout
    assert not list((project / "mlruns").glob("*.lock"))  # the study's lock goes with the run
    # compile: true would keep Inductor's caches in one folder of the study, for all its trials
    configs = [json.loads(p.read_text()) for p in (project / "mlruns" / ".trials").glob("tiny_e2e-*/trial-*/config.json")]
    assert len(configs) == 6 and {c["compile_cache"] for c in configs} == {
        str(next((project / "mlruns" / ".trials").glob("tiny_e2e-*")) / ".inductor")}

    again = orchestrate([str(spec)], project)
    assert again.returncode == 0, again.stderr
    assert "6 of 6 trials done" in again.stdout
    assert len(load_study(project, "tiny_e2e").get_trials()) == 6
    assert len(parent_runs(project, "tiny_e2e")) == 1  # the parent run is found again, not duplicated


@pytest.mark.long  # the suite kills mid-trial in test_reliability (trial_running) and test_kill_startup
def test_sigkill_mid_trial_then_the_same_command_completes(project: Path) -> None:
    spec = write_spec(project, SPEC.replace("[8, 16, 4096]", "[8, 16]"))
    proc = subprocess.Popen([ORCHESTRATE, str(spec)], cwd=project, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # wait until the second trial has been given to its process (its config written, no result
    # yet), then kill the orchestrator the hard way
    trials = project / "mlruns" / ".trials"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            (d / "config.json").exists() and not (d / "result.json").exists()
            for d in trials.glob("tiny_e2e-*/trial-0001")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    time.sleep(0.5)
    assert trial_processes(str(project / "mlruns")) == [], "a trial outlived the killed orchestrator"
    first = {t.number: t.user_attrs["metrics"] for t in load_study(project, "tiny_e2e").get_trials()
             if t.user_attrs.get("status") == "ok"}
    assert list(first) == [0]

    resumed = orchestrate([str(spec)], project)
    assert resumed.returncode == 0, resumed.stderr
    records = check_records(project, "tiny_e2e", n_results=4)
    assert {t.number: t.user_attrs["metrics"] for t in records["results"]}[0] == first[0]
    (lost,) = [t for t in records["study"].get_trials() if t.user_attrs.get("status") == "interrupted"]
    assert lost.params in [t.params for t in records["results"]]


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback(project: Path) -> None:
    # `true` exits without reading, long before orchestrate has started: every write hits a closed
    # pipe. Buffered stdout (no PYTHONUNBUFFERED, as on a user's machine: conftest.py removes it)
    # writes at the end.
    proc = subprocess.run(f"'{ORCHESTRATE}' '{ROOT / 'sweeps' / 'bert_memory.yaml'}' --dry-run | true; "
                          "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash", cwd=project,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "141"
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
