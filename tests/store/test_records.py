"""What a trial's MLflow run is tagged with, from its result file."""

from __future__ import annotations

from orchestrator.protocol import TrialResult
from orchestrator.store.records import run_tags


def test_fallback_ops_are_named_in_a_tag_and_absent_when_none_fell_back() -> None:
    result = TrialResult("ok", applied={"device": "mps"}, provenance={"torch_version": "2.13.0"},
                         info={"mps_fallback_ops": ["aten::_linalg_svd", "aten::nonzero"]})
    tags = run_tags(result, "ok", None)
    assert tags["mps_fallback_ops"] == "aten::_linalg_svd, aten::nonzero"
    assert tags["device"] == "mps" and tags["status"] == "ok"
    assert "mps_fallback_ops" not in run_tags(TrialResult("ok", info={"mps_fallback_ops": []}), "ok", None)


def test_a_result_counts_only_once_optuna_has_the_trial_finished(tmp_path) -> None:  # noqa: ANN001
    """``tell`` writes the status attribute before the state; another orchestrator on the study
    reading between the two writes must see the trial in flight, not a result to copy (a copy
    told with the RUNNING state ended a shared TPE sweep with a traceback)."""
    import optuna

    from orchestrator.store.records import results_of

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    writer = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    trial = writer.ask()
    trial.suggest_categorical("batch_size", [8, 16])
    trial.set_user_attr("status", "ok")  # the first half of a tell
    reader = optuna.load_study(study_name="s", storage=storage)
    assert results_of(reader.get_trials(deepcopy=False)) == []
    writer.tell(trial, 1.0)
    [result] = results_of(reader.get_trials(deepcopy=False))
    assert result.number == trial.number and result.values == [1.0]
