"""The proposer's exclusivity across a lost lock (``search/proposer.py``, ``store/coordination.py``):
a proposal made while the study's lock went away with its database session is checked again
against the study as it is, before its process runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from orchestrator.outcome import Status
from orchestrator.search.proposer import Asked, Proposer
from orchestrator.search.space import make_plan, suggest
from orchestrator.search.strategy import make_sampler
from orchestrator.spec.load import check_spec


class Lock:
    """A stand-in for ``coordination.StudyLock`` (``coordination.ProposalLock``): ``retaken`` counts its
    re-takings; ``confirm`` finds the lock held unless a test says otherwise."""

    def __init__(self) -> None:
        self.retaken = 0
        self.confirmed = 0
        self.lost_unseen = False

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def confirm(self) -> None:
        self.confirmed += 1
        if self.lost_unseen:  # StudyLock.confirm: its session is dead, so it is taken again
            self.retaken += 1


def proposer_with_a_rival(tmp_path: Path, lost: bool) -> tuple[Proposer, list[tuple[int, Status]], optuna.Study, Lock]:
    """A grid proposer whose ``ask`` is raced by another orchestrator that starts the same
    configuration meanwhile, which only a lost lock allows; ``lost``: the lock was taken again."""
    spec = check_spec({"name": "s", "experiment": "experiments.mlp", "device": "cpu",
                       "space": {"batch_size": [8, 16]}, "search": {"sampler": "grid"}}, Path("spec.yaml"), {})
    plan = make_plan(spec, "cpu")
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s", direction="maximize",
                                sampler=make_sampler(spec, 0))
    answered: list[tuple[int, Status]] = []
    lock = Lock()
    proposer = Proposer(spec, plan, study, lock, lambda trial, outcome, original: answered.append(
        (trial.number, outcome.status)))
    own_ask = proposer._ask
    raced = []

    def ask() -> tuple[Any, dict[str, Any]]:
        trial, sampled = own_ask()
        if not raced:  # the other orchestrator, between this one's view and its process
            study.enqueue_trial(sampled)
            suggest(study.ask(), plan)
            raced.append(sampled)
            lock.retaken += lost
        return trial, sampled

    proposer._ask = ask  # type: ignore[method-assign]
    return proposer, answered, study, lock


def test_a_proposal_made_across_a_lost_lock_defers_to_the_trial_started_meanwhile(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proposer, answered, study, _ = proposer_with_a_rival(tmp_path, lost=True)
    got = proposer.next()
    assert isinstance(got, Asked) and got.sampled == {"batch_size": 16}, got  # the configuration still free
    assert answered == [(0, Status.DEFERRED)]  # trial 0 stepped aside for the other's trial 1
    running = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    assert [(t.number, t.params) for t in running] == [(1, {"batch_size": 8}), (2, {"batch_size": 16})]


def test_a_lock_lost_unseen_is_confirmed_before_the_trial_runs_and_the_proposal_defers(tmp_path: Path) -> None:
    """The database restarted between two of Optuna's calls: its pool reconnected unseen, no call
    failed, so no retry took the lock again; the lock's own session died with it, and another
    orchestrator started the same configuration meanwhile (CI: one configuration measured twice
    across a restart). The proposer confirms the lock before its trial runs, which finds it lost."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proposer, answered, study, lock = proposer_with_a_rival(tmp_path, lost=False)
    lock.lost_unseen = True
    got = proposer.next()
    assert lock.confirmed and isinstance(got, Asked) and got.sampled == {"batch_size": 16}, got
    assert answered == [(0, Status.DEFERRED)]  # trial 0 stepped aside for the other's trial 1
    running = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    assert [(t.number, t.params) for t in running] == [(1, {"batch_size": 8}), (2, {"batch_size": 16})]


def test_with_the_lock_held_throughout_the_view_read_under_it_stands(tmp_path: Path) -> None:
    """The same race with the lock never lost cannot happen for real; here it shows that the
    study is read again only when the lock was lost (one read per proposal otherwise)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proposer, answered, _, lock = proposer_with_a_rival(tmp_path, lost=False)
    got = proposer.next()
    assert isinstance(got, Asked) and got.sampled == {"batch_size": 8} and answered == []
    assert lock.confirmed == 1  # confirmed before its process runs, and found held
