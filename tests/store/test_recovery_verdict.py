"""A trial the search's verdict stopped (several slots, ``search/flight``) is not run again on the
next invocation, unlike one Ctrl-C cut off (``store/recovery.Recovery.retry_queue``)."""

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
