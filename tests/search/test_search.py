"""Search behaviour end to end: OOM-aware skipping on a real CPU OOM, resume keeps the skip
records, repeats are answered from the record, and the stopping rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import check_records, command, load_study, orchestrate, write_spec

pytestmark = pytest.mark.slow


@pytest.fixture
def project(seeded_project: Path) -> Path:
    """The project folder, its MLflow store already created (``conftest.seed_mlflow``): these
    tests are about what happens after a project's first run is set up."""
    return seeded_project


SKIP_SPEC = """
    name: skip
    experiment: experiments.bert
    device: cpu
    fixed: {model: tiny, seq_len: 32, cpu_memory_limit_gib: 1.0}
    space:
      batch_size: [8, 4096, 8192]
      dtype: [bfloat16, float32]
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.05, timeout_s: 60}
    """


def test_a_real_oom_skips_larger_configurations_without_running_them(project: Path) -> None:
    spec = write_spec(project, SKIP_SPEC)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    records = check_records(project, "skip", n_results=6)
    status = {(t.params["batch_size"], t.params["dtype"]): t for t in records["results"]}
    assert status[(8, "bfloat16")].user_attrs["status"] == "ok"
    oom = status[(4096, "bfloat16")]
    assert oom.user_attrs["status"] == "oom"            # measured: a real CPU out-of-memory
    for key in ((4096, "float32"), (8192, "bfloat16"), (8192, "float32")):
        t = status[key]
        assert t.user_attrs["status"] == "skipped" and t.user_attrs["reason"] == "predicted_oom"
        assert t.user_attrs["predicted_by"] == oom.number
        assert "trial_dir" not in t.user_attrs           # no subprocess was started
        assert not list((project / "mlruns" / ".trials").glob(f"skip-*/trial-{t.number:04d}"))
        assert t.state.name == "PRUNED" and t.values is None and t.constraints["fits_in_memory"] > 0
        run = records["runs"][t.number][0]
        assert run.data.tags["status"] == "skipped" and run.data.tags["predicted_by"] == str(oom.number)
    assert "3 skipped" in proc.stdout

    # a resumed study keeps its skip records and runs nothing
    again = orchestrate([str(spec)], project)
    assert again.returncode == 0 and "6 of 6 trials done" in again.stdout
    after = check_records(project, "skip", n_results=6)
    assert sorted(t.number for t in after["results"] if t.user_attrs["status"] == "skipped") == \
        sorted(status[k].number for k in ((4096, "float32"), (8192, "bfloat16"), (8192, "float32")))


def test_skipping_can_be_turned_off(project: Path) -> None:
    spec = write_spec(project, SKIP_SPEC.replace("batch_size: [8, 4096, 8192]", "batch_size: [4096]")
                      .replace("{sampler: grid}", "{sampler: grid, skip_predicted_oom: false}"))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    records = check_records(project, "skip", n_results=2)
    assert [t.user_attrs["status"] for t in records["results"]] == ["oom", "oom"]


def test_tpe_repeats_are_answered_from_the_record_and_never_rerun(project: Path) -> None:
    spec = write_spec(project, """
        name: repeat
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          hidden_size: [8, 16, 24, 32]
        search: {sampler: tpe, seed: 0}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60}
        """)
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    records = check_records(project, "repeat", n_results=4)  # n_trials defaults to the 4 configurations
    trials = records["study"].get_trials()
    repeats = [t for t in trials if "repeat_of" in t.user_attrs]
    assert repeats, "seed 0 no longer makes TPE propose a measured configuration: pick another seed"
    for t in repeats:
        original = trials[t.user_attrs["repeat_of"]]
        assert original.params == t.params and original.values == t.values
    # after each repeat the sweep queued the nearest configuration without a result
    assert any("neighbour_of" in t.user_attrs for t in trials)
    sizes = [8, 16, 24, 32]
    for before, t in zip(trials, trials[1:]):
        if "neighbour_of" in t.user_attrs:
            assert before.user_attrs.get("repeat_of") == t.user_attrs["neighbour_of"]
            home = sizes.index(before.params["hidden_size"])
            unmeasured = [sizes.index(x.params["hidden_size"]) for x in trials[t.number:]
                          if "repeat_of" not in x.user_attrs]  # measured from here on
            assert abs(sizes.index(t.params["hidden_size"]) - home) == min(abs(i - home) for i in unmeasured)
            assert records["runs"][t.number][0].data.tags["neighbour_of"] == str(t.user_attrs["neighbour_of"])
            assert f"nearest unmeasured configuration to #{t.user_attrs['neighbour_of']}" in proc.stdout
    report = command(["report", str(spec)], project)
    assert report.returncode == 0 and "repeat of #" in report.stdout


def test_patience_stops_the_search(project: Path) -> None:
    spec = write_spec(project, """
        name: patience
        experiment: experiments.faults
        device: cpu
        fixed: {batch_size: 4}
        space:
          fault: [none, exception, exception2, exception3, exception4]
        search: {sampler: grid, patience: 2, max_failures: 10}
        trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60}
        """.replace("exception2, exception3, exception4", "exit, oom_cpu, nan"))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    assert "no improvement in 2 trials (search.patience)" in proc.stdout
    assert len(load_study(project, "patience").get_trials()) == 3


MULTI = """
    name: multi
    experiment: experiments.faults
    device: cpu
    fixed: {batch_size: 4}
    space:
      hidden_size: [8, 64, 256]
    objective:
      metrics: {samples_per_s: maximize, peak_memory_gib: minimize}
      constraints: {peak_memory_gib: {max: LIMIT}}
    search: {sampler: nsga2, seed: 0}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.02, timeout_s: 60}
    """


def test_multi_objective_nsga2_with_a_constraint_reports_the_pareto_front(project: Path) -> None:
    spec = write_spec(project, MULTI.replace("LIMIT", "100"))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    assert "Pareto front:" in proc.stdout
    study = load_study(project, "multi")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    records = check_records(project, "multi", n_results=3)
    for t in records["results"]:
        assert len(t.values) == 2 and t.constraints["peak_memory_gib"] <= 0  # feasible: under 100 GiB
        assert t.values[1] == t.user_attrs["metrics"]["peak_memory_gib"]


def test_a_violated_constraint_makes_a_measured_trial_infeasible(project: Path) -> None:
    spec = write_spec(project, MULTI.replace("LIMIT", "0.001"))
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 0, proc.stderr
    assert "None: no measured configuration meets the constraints: peak_memory_gib <= 0.001 (lowest measured " \
        in proc.stdout, proc.stdout
    for t in check_records(project, "multi", n_results=3)["results"]:
        # measured, so it keeps its real values, and the constraint says by how much it is over
        assert t.state.name == "COMPLETE" and t.constraints["peak_memory_gib"] > 0
        assert t.constraints["peak_memory_gib"] == pytest.approx(t.values[1] - 0.001)
