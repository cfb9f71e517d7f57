"""Repairing what a dead orchestrator left, and deciding what runs again.

Per trial the sweep does, in this order: ask (Optuna trial RUNNING), MLflow run created (by the
writer thread), the process, tell Optuna, MLflow run finished. So after a kill:

- a RUNNING trial was cut off. With SQLite (one orchestrator per study, ``study.study_lock``)
  every RUNNING trial is such a one; with a server database only those whose heartbeat is older
  than ``search.grace_period_s`` are (``fail_stale``): a live orchestrator's trials are never
  touched. Each becomes FAIL with status ``interrupted`` (its MLflow run KILLED) and its
  configuration is queued again;
- MLflow is converged to the study (``converge``): a told trial whose MLflow run is missing,
  unfinished or differs from Optuna's record gets it written from that record (with a server
  database only once it was told more than the grace period ago: another orchestrator's writer
  thread may still be on it). If MLflow refuses the write (a full disk), nothing is started.

``retry_queue`` decides what runs again in this invocation: interrupted configurations, those
whose last attempt ended ``error`` (a fault in the user's code or environment, not a fact about
the configuration: retried once per invocation, never counted toward ``n_trials``), and, asked
with ``--retry``, results of the statuses named there. Each queued trial carries ``retry_of`` (the
trial it repeats) and ``retry_reason`` (that trial's status), so the report can show the history.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from orchestrator import trialdir
from orchestrator.outcome import DIED_DETAIL, RUN_AGAIN, VERDICT_DETAIL, Status
from orchestrator.store.record import RecordValues, TrialRecord, enqueue, is_attempt, status_of, write, write_stored
from orchestrator.store.records import results_of
from orchestrator.keys import config_key

if TYPE_CHECKING:
    from mlflow.entities import Run
    from optuna.study import Study
    from optuna.trial import FrozenTrial

    from orchestrator.store.outage import Outage
    from orchestrator.store.tracking import Tracker

STALE_DETAIL = ("its orchestrator stopped sending heartbeats (search.grace_period_s); "
                "its configuration is run again")


class Recovery:
    def __init__(self, study: Study, tracker: Tracker, work_dir: Path, shared: bool, grace_s: float,
                 outage: Outage | None = None, fits: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """``tracker``: the synchronous ``tracking.Tracker`` (recovery runs before the loop, and
        between its trials from the main thread); ``outage``: the study database's
        ``outage.Outage`` guard (an outage excuses missed heartbeats, ``fail_stale``); ``fits``:
        whether a configuration is one of the spec's (``space.contains``), else all are."""
        self.study, self.tracker, self.work_dir = study, tracker, work_dir
        self.shared, self.grace_s, self.outage = shared, grace_s, outage
        self.fits = fits
        self.left: list[dict[str, Any]] = []
        """Configurations that would run again but are no longer in the spec (``retry_queue``)."""
        self._silent: dict[int, float] = {}
        """RUNNING trials seen without any heartbeat, and when (``_orphans``)."""
        self.repaired = 0
        """Trials whose MLflow record this run wrote or repaired from the study (``converge``)."""
        self.lacked = 0
        """Of those, the trials whose record MLflow lacked or held wrong (``Converged.lacked``), but
        for the ones this run ended as interrupted (their runs are written with them: a review saw a
        resume after a kill say that MLflow lacked records)."""
        self._ended: set[int] = set()

    def trial_dir(self, number: int) -> Path:
        return trialdir.folder(self.work_dir, number)

    # -- at start ---------------------------------------------------------------------------------
    def recover(self, artifacts: object = None) -> int:
        """Repair what killed orchestrators left; returns how many trials were ended as interrupted.
        MLflow is then converged to the study (``converge``; ``artifacts``: compare the runs' files
        too, ``agreement.compare``); if it refuses a write, nothing is started: ``StoreUnwritable``
        says so."""
        from optuna.trial import TrialState

        interrupted = self.fail_stale() if self.shared else 0
        if not self.shared:  # one orchestrator per SQLite study: every RUNNING trial was cut off
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                self._end_interrupted(t)
                self._ended.add(t.number)
                interrupted += 1
        done = self.converge(artifacts=artifacts)
        if done.refused is not None:
            raise done.refused.with_outcome(
                f"{len(done.missing)} trial(s)' records are missing from MLflow, and nothing was started: run "
                "the same command again once it can be written (the study holds every result)")
        return interrupted

    def converge(self, only: set[int] | None = None, artifacts: object = None) -> Any:
        """Write what MLflow lacks of the study's ended trials (``converge.converge``), but for
        the trials in flight: with a server database, other orchestrators' RUNNING trials and
        those told less than a grace period ago (their writer threads finish them). ``only``: these
        trial numbers alone. Counts what it repaired in ``repaired``."""
        from orchestrator.store.converge import converge

        trials = self.study.get_trials(deepcopy=False)
        now = datetime.datetime.now()
        in_flight = {t.number for t in trials if only is not None and t.number not in only}
        if self.shared:
            in_flight |= {t.number for t in trials if t.state.name == "RUNNING" or (
                t.datetime_complete is not None and (now - t.datetime_complete).total_seconds() < self.grace_s)}
        done = converge(self.tracker, trials, self.trial_dir, in_flight, artifacts=artifacts)
        self.repaired += len(done.repaired)
        self.lacked += len(done.lacked - self._ended)
        return done

    def fail_stale(self) -> int:
        """Server database: fail the RUNNING trials whose orchestrator stopped sending heartbeats
        and mark their MLflow runs KILLED. Returns how many this orchestrator failed.

        The steps of ``optuna.storages.fail_stale_trials``, with the trial's ``status`` and
        ``detail`` written before its state (a finished trial's attributes cannot change). Callers
        hold the study's ``StudyLock``, so two orchestrators never fail the same trial; the storage
        still refuses a second FAIL (``UpdateFinishedTrialError``), which is not counted."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        from orchestrator.store.optuna_internals import heartbeat_enabled, stale_trial_ids, storage_of

        storage = storage_of(self.study)
        if not heartbeat_enabled(storage) or self.excused():
            return 0
        failed: list[Any] = []
        for trial_id in stale_trial_ids(self.study) + self._orphans():
            try:
                write_stored(storage, trial_id, status=Status.INTERRUPTED, detail=STALE_DETAIL)
                if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                    failed.append(storage.get_trial(trial_id))
                    self._ended.add(failed[-1].number)
            except UpdateFinishedTrialError:  # its orchestrator told it after all
                continue
        if failed:
            from orchestrator.store.writefault import StoreUnwritable

            try:
                runs = self.tracker.trial_runs()
                for t in failed:
                    for run in runs.get(t.number, []) or [self._new_run(t)]:
                        self.tracker.finish_trial(run.info.run_id, Status.INTERRUPTED, {}, {"detail": STALE_DETAIL},
                                                  trialdir.files(self.trial_dir(t.number)))  # where this host has them
            except StoreUnwritable:
                pass  # MLflow refuses (a full disk): a later converge writes these runs from the study
        return len(failed)

    def excused(self) -> bool:
        """Whether heartbeats may be missing because of an outage, not a dead orchestrator: this
        orchestrator lost the database less than a grace period ago, or the server (re)started
        less than one ago (then nobody could write a heartbeat while it was down)."""
        from orchestrator.store.optuna_internals import engine_of, storage_of
        from orchestrator.store.outage import server_started_at

        if self.outage is not None and self.outage.recently(self.grace_s):
            return True
        engine = engine_of(storage_of(self.study))
        up = self.outage.call(server_started_at, engine) if self.outage is not None else server_started_at(engine)
        return up is not None and up < 2 * self.grace_s

    def _orphans(self) -> list[int]:
        """RUNNING trials that never had a heartbeat, seen so in two checks a grace period apart:
        asked by an orchestrator that died before its first beat (or asked twice through a lost
        connection), they would otherwise stay RUNNING forever (Optuna's stale check skips them)."""
        import time

        from orchestrator.store.optuna_internals import engine_of, storage_of, study_id
        from orchestrator.store.optuna_sql import silent_trial_ids

        engine = engine_of(storage_of(self.study))
        if engine is None:
            return []
        silent = (self.outage.call(silent_trial_ids, engine, study_id(self.study)) if self.outage is not None
                  else silent_trial_ids(engine, study_id(self.study)))
        now = time.monotonic()
        self._silent = {i: self._silent.get(i, now) for i in silent}
        return [i for i, since in self._silent.items() if now - since >= self.grace_s]

    def _end_interrupted(self, t: FrozenTrial) -> None:
        """A trial cut off by a dead orchestrator: FAIL, status ``interrupted`` (its MLflow run is
        then KILLED by ``converge``)."""
        from optuna.trial import TrialState

        from orchestrator.store.optuna_internals import trial_of

        trial = trial_of(self.study, t)
        write(trial, status=Status.INTERRUPTED, detail=DIED_DETAIL)
        self.study.tell(t.number, state=TrialState.FAIL)

    def _new_run(self, t: FrozenTrial) -> Run:
        run_id = self.tracker.start_trial(t.number, t.params, {})
        return self.tracker.client.get_run(run_id)

    # -- what runs again ----------------------------------------------------------------------------
    def retry_queue(self, retry: Iterable[str] = ()) -> tuple[dict[str, int], dict[str, int]]:
        """Queue the configurations that run again in this invocation (see the module). Returns
        (how many were queued, by reason) and the ``superseded`` map for the proposer (config key
        -> first trial number that counts for it: its old result stops counting)."""
        from optuna.trial import TrialState

        retry = tuple(retry)
        trials = self.study.get_trials(deepcopy=False)
        results = {config_key(t.params): t for t in results_of(trials)}
        busy = {config_key(t.params) for t in trials if t.state == TrialState.RUNNING and t.params}
        busy |= {config_key(t.system_attrs.get("fixed_params") or {}) for t in trials
                 if t.state == TrialState.WAITING}
        last_attempt: dict[str, Any] = {}
        for t in sorted(trials, key=lambda t: t.number):
            params = t.system_attrs.get("fixed_params") or t.params or {}  # killed before or during suggest
            if params and is_attempt(t) and t.state in (TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED):
                last_attempt[config_key(params)] = t
        queued: dict[str, int] = {}
        superseded: dict[str, int] = {}
        first_new = len(trials)
        for key, t in last_attempt.items():
            if key in busy:
                continue
            status = status_of(t) or Status.INTERRUPTED
            if key in results:
                if status_of(results[key]) not in retry:
                    continue
                t, status = results[key], status_of(results[key])  # type: ignore[assignment]  # in retry (above): a status
            elif status not in RUN_AGAIN or TrialRecord.of(t).detail == VERDICT_DETAIL:
                continue  # a final result, or stopped by a verdict (the planner asks for it if it must)
            params = t.system_attrs.get("fixed_params") or t.params  # whole where it was enqueued
            if self.fits is not None and not self.fits(params):  # an edited spec of a study with no result
                self.left.append(params)
                busy.add(key)
                continue
            if key in results:  # its old result stops counting once the new trial has one
                superseded[key] = first_new
            neighbour_of = TrialRecord.of(t).neighbour_of
            values: RecordValues = {"retry_of": t.number, "retry_reason": status}
            if neighbour_of is not None:
                values["neighbour_of"] = neighbour_of
            enqueue(self.study, params, **values)
            busy.add(key)
            queued[status] = queued.get(status, 0) + 1
        return queued, superseded
