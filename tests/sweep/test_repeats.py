"""``trial.repeats``: a configuration measured in several fresh processes, recorded as the median.

The combining rule is a pure function, tested with a table; the end-to-end test runs real trial
processes and reads the study and the MLflow runs back through their own APIs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from conftest import check_records, orchestrate, write_spec

@pytest.fixture
def project(seeded_project: Path) -> Path:
    """The project folder, its MLflow store already created (``conftest.seed_mlflow``): these
    tests are about what happens after a project's first run is set up."""
    return seeded_project


from orchestrator.protocol import TrialResult
from orchestrator.launch import Launched
from orchestrator.outcome import Outcome
from orchestrator.sweep.repeats import combine
from orchestrator.trialdir import repeat_dir_name


def ok(samples: float, peak: float, duration: float = 2.0, rss: float | None = 0.5) -> Launched:
    metrics = {"samples_per_s": samples, "peak_memory_gib": peak, "loss": samples / 100}
    return Launched(Outcome("ok", None, TrialResult("ok", metrics=metrics, provenance={"device": "cpu"})),
                    0, duration, rss, Path(f"/t/{samples}/trial.log"))


def failed(status: str, detail: str, duration: float = 1.0) -> Launched:
    return Launched(Outcome(status, detail, TrialResult(status)), 1, duration, 0.9, Path("/t/f/trial.log"))


def test_one_run_is_passed_through_unchanged() -> None:
    run = ok(100.0, 1.0)
    assert combine([run], 1, ["samples_per_s"]) is run


def test_all_ok_median_metrics_largest_peak_summed_cost() -> None:
    runs = [ok(1255.0, 0.44, 2.9, 0.6), ok(991.0, 0.46, 2.8, 0.7), ok(922.0, 0.43, 3.0, None)]
    out = combine(runs, 3, ["samples_per_s"])
    m = out.outcome.metrics
    assert out.outcome.status == "ok"
    assert m["samples_per_s"] == 991.0 and m["loss"] == pytest.approx(9.91)       # medians
    assert m["peak_memory_gib"] == 0.46                                            # the largest
    assert m["samples_per_s_spread"] == pytest.approx((1255 - 922) / 991)
    assert out.duration_s == pytest.approx(8.7) and out.peak_rss_gib == 0.7
    assert out.outcome.processes == 3 and len(out.outcome.repeat_metrics) == 3
    assert out.outcome.result.provenance == {"device": "cpu"}


def test_spread_for_samples_per_s_and_every_objective_metric_is_relative_to_the_median() -> None:
    runs = [ok(100.0, 1.0), ok(120.0, 2.0), ok(110.0, 4.0)]
    m = combine(runs, 3, ["peak_memory_gib"]).outcome.metrics
    assert m["peak_memory_gib"] == 4.0                                   # the largest...
    assert m["peak_memory_gib_spread"] == pytest.approx((4.0 - 1.0) / 2.0)  # ...but spread / median
    assert m["samples_per_s_spread"] == pytest.approx(20 / 110)          # always, objective or not
    assert "loss_spread" not in m


def test_an_even_number_of_repeats_takes_the_middle_mean() -> None:
    out = combine([ok(100.0, 1.0), ok(200.0, 1.0)], 2, ["samples_per_s"])
    assert out.outcome.metrics["samples_per_s"] == 150.0


@pytest.mark.parametrize(("runs", "status", "detail"), [
    ([failed("oom", "CUDA out of memory")], "oom", "CUDA out of memory"),        # first: as it is
    ([ok(1.0, 1.0), failed("oom", "CUDA out of memory")], "oom",
     "repeat 2 of 3: CUDA out of memory (repeat 1 ran ok)"),
    ([ok(1.0, 1.0), ok(1.0, 1.0), failed("crashed", "killed by SIGKILL")], "crashed",
     "repeat 3 of 3: killed by SIGKILL (repeats 1-2 ran ok)"),
    ([ok(1.0, 1.0), failed("timeout", None)], "timeout", "repeat 2 of 3: timeout (repeat 1 ran ok)"),
])
def test_the_first_repeat_that_is_not_ok_decides(runs: list[Launched], status: str, detail: str) -> None:
    out = combine(runs, 3, ["samples_per_s"])
    assert out.outcome.status == status and out.outcome.detail == detail
    assert out.duration_s == pytest.approx(sum(r.duration_s for r in runs))
    assert out.outcome.processes == len(runs)


def test_repeat_folders() -> None:
    assert repeat_dir_name(1) is None and repeat_dir_name(2) == "repeat-2"


@pytest.mark.slow
def test_a_sweep_with_repeats_runs_each_configuration_in_several_processes(project: Path) -> None:
    spec = write_spec(project, """
        name: repeats
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          fault: [none, oom_cpu]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60, repeats: 3}
        """)
    dry = orchestrate([str(spec), "--dry-run"], project)
    assert "measured 3 times, each in a fresh process (median)" in dry.stdout
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    records = check_records(project, "repeats", n_results=2)
    good, oom = sorted(records["results"], key=lambda t: t.params["fault"] != "none")
    assert "(median of 3, spread" in proc.stdout

    # three processes, three result files; the recorded values are their median and largest peak
    folder = Path(good.user_attrs["trial_dir"])
    files = [folder / "result.json", folder / "repeat-2" / "result.json", folder / "repeat-3" / "result.json"]
    per_process = [{k: v for k, v in json.loads(f.read_text())["metrics"].items() if v is not None}
                   for f in files]
    assert len({m["measure_s"] for m in per_process}) == 3  # three timed windows, not one copied
    assert good.user_attrs["repeat_metrics"] == per_process
    assert good.values[0] == statistics.median(m["samples_per_s"] for m in per_process)
    assert good.user_attrs["metrics"]["peak_memory_gib"] == max(m["peak_memory_gib"] for m in per_process)
    assert good.user_attrs["processes"] == 3

    run = records["runs"][good.number][0]
    assert run.data.tags["processes"] == "3"
    assert run.data.metrics["samples_per_s"] == pytest.approx(good.values[0], rel=1e-6)
    assert run.data.metrics["samples_per_s_spread"] >= 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/mlruns/mlflow.db")
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"trial.log", "result.json", "config.json", "repeat-2", "repeat-3"} <= names
    assert {a.path for a in client.list_artifacts(run.info.run_id, "repeat-3")} == \
        {"repeat-3/trial.log", "repeat-3/result.json", "repeat-3/config.json"}

    # an out-of-memory configuration is not run again: one process, and the OOM recorded as such
    assert oom.user_attrs["status"] == "oom" and oom.user_attrs["processes"] == 1
    assert not (Path(oom.user_attrs["trial_dir"]) / "repeat-2").exists()
    assert "DefaultCPUAllocator" in oom.user_attrs["detail"]


@pytest.mark.slow
def test_sigkill_after_a_repeated_trial_was_told_then_resume_completes_its_run(project: Path) -> None:
    """Killed between telling Optuna and finishing the MLflow run: the resume completes the run
    from the record, with every process's files and the last process's result."""
    import signal as sig

    spec = write_spec(project, """
        name: repkill
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          hidden_size: [8, 16]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60, repeats: 2}
        """)
    killed = orchestrate([str(spec)], project, env={"ORCHESTRATE_KILL_AT": "after_tell:1"})
    assert killed.returncode == -sig.SIGKILL, (killed.returncode, killed.stderr)
    resumed = orchestrate([str(spec)], project)
    assert resumed.returncode == 0, resumed.stderr
    records = check_records(project, "repkill", n_results=2)
    first = records["results"][0]
    run = records["runs"][first.number][0]
    assert run.info.status == "FINISHED" and run.data.tags["processes"] == "2"
    assert run.data.metrics["samples_per_s"] == pytest.approx(first.values[0], rel=1e-6)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/mlruns/mlflow.db")
    assert {a.path for a in client.list_artifacts(run.info.run_id, "repeat-2")} == \
        {"repeat-2/trial.log", "repeat-2/result.json", "repeat-2/config.json"}


def test_repeats_combine_their_throughputs_95_percent_interval() -> None:
    """``throughput_ci95`` over the processes: the larger of their own spread and their windows'
    (``harness/spread.combined_ci95``), over the square root of their number."""
    runs = [ok(100.0, 1.0), ok(150.0, 1.0)]
    for r in runs:
        r.outcome.result.metrics["throughput_ci95"] = 0.02
    m = combine(runs, 2, ["samples_per_s"]).outcome.metrics
    assert m["throughput_ci95"] == pytest.approx(1.96 * statistics.stdev([math.log(100), math.log(150)]) / math.sqrt(2))


def test_a_configuration_measured_again_is_combined_with_its_earlier_measurements() -> None:
    """The auto search's measurement again (``remeasure_of``): the new trial's result is the median
    of every measurement of the configuration, and says how many trials made it."""
    from types import SimpleNamespace

    from orchestrator.sweep.repeats import remeasured

    earlier = SimpleNamespace(user_attrs={"status": "ok", "metrics": {"samples_per_s": 100.0, "throughput_ci95": 0.1},
                                          "measurements": 1})
    now = ok(120.0, 1.0).outcome
    now.result.metrics["throughput_ci95"] = 0.1
    outcome, trials = remeasured(now, earlier, ["samples_per_s"])
    assert trials == 2 and outcome.processes == 2 and len(outcome.repeat_metrics) == 2
    assert outcome.metrics["samples_per_s"] == pytest.approx(110.0)
    assert outcome.metrics["samples_per_s_spread"] == pytest.approx(20 / 110)
    between = statistics.stdev([math.log(100), math.log(120)])        # wider than the windows' 0.1 / 1.96
    assert outcome.metrics["throughput_ci95"] == pytest.approx(1.96 * between / math.sqrt(2))
    third, trials = remeasured(ok(130.0, 1.0).outcome, SimpleNamespace(user_attrs={
        "status": "ok", "metrics": outcome.metrics, "repeat_metrics": list(outcome.repeat_metrics),
        "measurements": 2}), ["samples_per_s"])
    assert trials == 3 and third.metrics["samples_per_s"] == 120.0    # the median of 100, 120, 130
