"""``--dry-run``'s line on the study (``report/dryrun._progress``) and the start-up's question
whether the study already holds a measured result (``sweep/run._has_ok_result``, which skips the
smoke step): both read one SQLite query's counts (``optuna_sql.trial_counts``) without creating
anything, on studies the installed Optuna wrote."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.report.dryrun import _progress
from orchestrator.sweep.run import _has_ok_result


def spec_for(url: str, name: str = "s") -> Any:
    return SimpleNamespace(storage=url, name=name)


def study_with(url: str, states: list[str], name: str = "s") -> None:
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    for state in states:
        if state == "WAITING":
            study.enqueue_trial({})
        elif state == "RUNNING":
            study.ask()
        elif state == "COMPLETE":
            study.tell(study.ask(), 1.0)
        else:
            study.tell(study.ask(), state=TrialState[state])


@pytest.mark.parametrize("states, progress, ok", [
    ([], "; the study does not exist yet", False),
    (["WAITING", "WAITING"], "; the study does not exist yet", False),  # queued only: nothing ran yet
    (["FAIL", "WAITING"], "; the study exists with 1 trial: a run resumes it", False),
    (["COMPLETE", "PRUNED", "RUNNING", "WAITING"], "; the study exists with 3 trials: a run resumes it", True),
])
def test_progress_and_a_measured_result(tmp_path: Path, states: list[str], progress: str, ok: bool) -> None:
    url = f"sqlite:///{tmp_path}/optuna.db"
    study_with(url, states)
    study_with(url, ["COMPLETE"] * 2, name="other")  # another study in the same file is not counted
    assert _progress(spec_for(url)) == progress
    assert _has_ok_result(spec_for(url)) is ok


def test_no_file_a_server_url_and_an_unreadable_file(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path}/absent/optuna.db"
    assert _progress(spec_for(missing)) == "; the study does not exist yet" and not _has_ok_result(spec_for(missing))
    assert not (tmp_path / "absent").exists()
    server = "postgresql://nobody@127.0.0.1:1/none"
    assert _progress(spec_for(server)) == "; the study does not exist yet" and not _has_ok_result(spec_for(server))
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 100)
    assert _progress(spec_for(f"sqlite:///{notes}")) == "" and not _has_ok_result(spec_for(f"sqlite:///{notes}"))


def test_the_plan_names_the_sampler_that_runs_and_counts_stepped_ranges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two objectives with no sampler run TPE, as the plan says (the run's header said "auto
    sampler"); a stepped range has a count (it showed ``x~``); one configuration is singular."""
    from orchestrator.report.dryrun import print_plan
    from orchestrator.spec.load import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.mlp\ndevice: cpu\nspace:\n  batch_size: {low: 8, high: 64, step: 8}\n"
                    "  dtype: [float32, bfloat16]\nobjective: {metrics: {samples_per_s: maximize, peak_memory_gib: minimize}}\n")
    print_plan(load_spec(path))
    out = capsys.readouterr().out
    assert "  study        t: tpe sampler\n" in out and "  space        16 configurations: batch_size x8, dtype x2\n" in out
    path.write_text("name: t\nexperiment: experiments.mlp\ndevice: cpu\nspace:\n  batch_size: [8]\n")
    print_plan(load_spec(path))
    assert "  space        1 configuration: batch_size x1\n" in capsys.readouterr().out


def test_a_named_gpu_is_said_to_be_checked_by_the_run_and_cuda_s_fraction_rule_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dry run imports no torch: it says the run asks whether CUDA is here, and refuses what the
    run would refuse without asking (CUDA's memory_fraction is at most 1.0; it passed before)."""
    from orchestrator.errors import SpecError
    from orchestrator.report.dryrun import print_plan
    from orchestrator.spec.load import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.mlp\ndevice: cuda\nfixed:\n  memory_fraction: 0.5\n")
    print_plan(load_spec(path))
    assert "  device       cuda (a real run asks torch whether it is here)\n" in capsys.readouterr().out
    path.write_text("name: t\nexperiment: experiments.mlp\ndevice: cuda\nfixed:\n  memory_fraction: 1.5\n")
    with pytest.raises(SpecError, match="fixed.memory_fraction: on CUDA memory_fraction must be at most 1.0, got 1.5"):
        print_plan(load_spec(path))
