"""Whether a sweep runs a study now, read without changing it: for SQLite, whether an orchestrator
holds the study's lock; for a server database, which trials send heartbeats. ``check`` leaves the
trials in flight uncompared; ``report`` names the RUNNING trials no sweep runs (``cut_off``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Union

from orchestrator.errors import StudyError
from orchestrator.spec.load import SweepSpec
from orchestrator.urls import sqlite_path

if TYPE_CHECKING:
    from optuna import Study

    from orchestrator.store.studyread import StoredStudy

    AnyStudy = Union[Study, StoredStudy]


def running_now(spec: SweepSpec, study: "AnyStudy") -> tuple[str | None, set[int]]:
    """Whether a sweep runs the study now (what to say, or None), and the trial numbers it has
    in flight: RUNNING ones, and those told less than a grace period ago."""
    from orchestrator.store.study import check_not_locked

    grace = datetime.timedelta(seconds=spec.search.grace_period_s)
    running = {t.number for t in study.trials if t.state.name == "RUNNING"}
    if sqlite_path(spec.storage) is not None:
        try:
            check_not_locked(spec.storage, spec.name)
            return None, set()
        except StudyError:
            return "a sweep is running this study now", running | _told_within(study, grace)
    from orchestrator.store.optuna_sql import live_trials

    alive = live_trials(spec.storage, spec.name, grace.total_seconds())
    return (f"{len(alive)} trial(s) are running now" if alive else None), alive | _told_within(study, grace)


def cut_off(spec: SweepSpec, study: "AnyStudy") -> set[int]:
    """The RUNNING trials no orchestrator runs now (``running_now``): a killed sweep's, which the next
    run records interrupted (a tour: ``report`` said "running" where ``check`` said "cut off")."""
    running = {t.number for t in study.trials if t.state.name == "RUNNING"}
    return running - running_now(spec, study)[1] if running else set()


def _told_within(study: "AnyStudy", grace: datetime.timedelta) -> set[int]:
    """Trials told less than ``grace`` ago (by this clock, as Optuna's times): their
    orchestrator's writer thread may still be writing their runs."""
    now = datetime.datetime.now()
    return {t.number for t in study.trials if t.datetime_complete is not None and now - t.datetime_complete < grace}
