"""What runs again on the next invocation (``store/recovery.Recovery.retry_queue``): not a trial
the search's verdict stopped (several slots, ``search/flight``), unlike one Ctrl-C cut off; a
trial killed while it was given its configuration runs again whole."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from orchestrator.outcome import INTERRUPTED_DETAIL, VERDICT_DETAIL, Status
from orchestrator.store.record import write
from orchestrator.store.recovery import Recovery


def test_a_trial_stopped_by_the_verdict_is_not_queued_again(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    for batch, detail in ((16, VERDICT_DETAIL), (32, INTERRUPTED_DETAIL)):
        study.enqueue_trial({"batch_size": batch})
        trial = study.ask({"batch_size": CategoricalDistribution([16, 32])})
        write(trial, status=Status.INTERRUPTED, detail=detail)
        study.tell(trial, state=TrialState.FAIL)
    assert [t.params["batch_size"] for t in study.trials] == [16, 32]
    queued, _ = Recovery(study, None, tmp_path, False, 60.0).retry_queue()  # type: ignore[arg-type]
    waiting = [t.system_attrs.get("fixed_params") for t in study.get_trials(states=(TrialState.WAITING,))]
    assert queued == {Status.INTERRUPTED: 1}
    assert waiting == [{"batch_size": 32}]


def test_a_trial_killed_while_given_its_configuration_runs_again_whole(tmp_path: Path) -> None:
    """The fault tour: a SIGKILL after Optuna stored hidden_size but before batch_size left trial 10
    with half its configuration; every later run said "not run again: hidden_size=64 (... the spec
    no longer holds)", and the report agreed, of a spec never edited. The configuration it was
    enqueued with is the one queued, and the spec's check passes it."""
    from orchestrator.report.document import held
    from orchestrator.search.space import contains, make_plan
    from orchestrator.spec.load import load_spec

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text("name: half\nexperiment: experiments.mlp\ndevice: cpu\n"
                         "space: {hidden_size: [32, 64], batch_size: [4, 8]}\n")
    spec = load_spec(spec_path)
    plan = make_plan(spec, "cpu")
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"hidden_size": 64, "batch_size": 8})
    trial = study.ask()
    trial.suggest_categorical("hidden_size", [32, 64])  # killed here, before batch_size
    write(trial, status=Status.INTERRUPTED, detail=INTERRUPTED_DETAIL)
    study.tell(trial, state=TrialState.FAIL)
    recovery = Recovery(study, None, tmp_path, False, 60.0, fits=lambda p: contains(plan, p))  # type: ignore[arg-type]
    queued, _ = recovery.retry_queue()
    assert queued == {Status.INTERRUPTED: 1} and recovery.left == []
    assert [t.system_attrs.get("fixed_params") for t in study.get_trials(states=(TrialState.WAITING,))] == \
        [{"hidden_size": 64, "batch_size": 8}]
    row = {"number": 0, "status": Status.INTERRUPTED, "params": {"hidden_size": 64}, "retried_as": None}
    assert "dropped" not in held(spec, "cpu", [row])[0]  # the report said "the spec no longer holds it"
