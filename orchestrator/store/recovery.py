"""Repairing what a dead orchestrator left, and deciding what runs again.

Per trial the sweep does, in this order: ask (Optuna trial RUNNING), MLflow run created (by the
writer thread), the process, tell Optuna, MLflow run finished. So after a kill:

- a RUNNING trial was cut off. With SQLite (one orchestrator per study, ``study.study_lock``)
  every RUNNING trial is such a one; with a server database only those whose heartbeat is older
  than ``search.grace_period_s`` are (``fail_stale``): a live orchestrator's trials are never
  touched. Each becomes FAIL with status ``interrupted`` (its MLflow run KILLED) and its
  configuration is queued again;
- a told trial whose MLflow run is missing or unfinished gets it finished from Optuna's record
  (with a server database only once it was told more than the grace period ago: another
  orchestrator's writer thread may still be on it).

``retry_queue`` decides what runs again in this invocation: interrupted configurations, those
whose last attempt ended ``error`` (a fault in the user's code or environment, not a fact about
the configuration: retried once per invocation, never counted toward ``n_trials``), and, asked
with ``--retry``, results of the statuses named there. Each queued trial carries ``retry_of`` (the
trial it repeats) and ``retry_reason`` (that trial's status), so the report can show the history.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Iterable

from orchestrator import metrics as M
from orchestrator.outcome import RUN_AGAIN
from orchestrator.store.records import is_attempt, results_of, run_metrics, run_tags, trace_tags
from orchestrator.sweep.repeats import repeat_dir_name, repeat_path
from orchestrator.search.space import config_key
from orchestrator.store.tracking import TERMINAL

INTERRUPTED_DETAIL = "the orchestrator died during this trial; its configuration is run again"
STALE_DETAIL = ("its orchestrator stopped sending heartbeats (search.grace_period_s); "
                "its configuration is run again")


def trial_files(trial_dir: Path, processes: int = 1) -> list[tuple[Path, str | None]]:
    """A trial's files and the MLflow artifact folder of each (repeat k > 1 in ``repeat-<k>/``)."""
    out: list[tuple[Path, str | None]] = []
    for k in range(1, processes + 1):
        out += [(repeat_path(trial_dir, k) / name, repeat_dir_name(k))
                for name in ("trial.log", "result.json", "config.json")]
    return out


class Recovery:
    def __init__(self, study: Any, tracker: Any, work_dir: Path, shared: bool, grace_s: float,
                 outage: Any = None) -> None:
        """``tracker``: the synchronous ``tracking.Tracker`` (recovery runs before the loop, and
        between its trials from the main thread); ``outage``: the study database's
        ``outage.Outage`` guard (an outage excuses missed heartbeats, ``fail_stale``)."""
        self.study, self.tracker, self.work_dir = study, tracker, work_dir
        self.shared, self.grace_s, self.outage = shared, grace_s, outage
        self._silent: dict[int, float] = {}
        """RUNNING trials seen without any heartbeat, and when (``_orphans``)."""

    def trial_dir(self, number: int) -> Path:
        return self.work_dir / f"trial-{number:04d}"

    # -- at start ---------------------------------------------------------------------------------
    def recover(self) -> int:
        """Repair what killed orchestrators left; returns how many trials were ended as interrupted."""
        from optuna.trial import TrialState

        interrupted = self.fail_stale() if self.shared else 0
        runs = self.tracker.trial_runs()
        now = datetime.datetime.now()
        for t in self.study.get_trials(deepcopy=False):
            mine = runs.get(t.number, [])
            if t.state == TrialState.RUNNING:
                if self.shared:
                    continue  # alive (its heartbeat is fresh) or failed by fail_stale above
                self._end_interrupted(t, mine)
                interrupted += 1
                continue
            if t.state == TrialState.WAITING:
                continue
            if self.shared and t.datetime_complete is not None and \
                    (now - t.datetime_complete).total_seconds() < self.grace_s:
                continue  # told moments ago: its orchestrator's writer thread finishes the run
            if not mine or any(r.info.status not in TERMINAL for r in mine):
                if not mine:
                    mine = [self._new_run(t)]
                for run in mine:
                    if run.info.status not in TERMINAL:
                        self._finish_from_record(run.info.run_id, t, t.user_attrs.get("status", "interrupted"))
        return interrupted

    def fail_stale(self) -> int:
        """Server database: fail the RUNNING trials whose orchestrator stopped sending heartbeats
        and mark their MLflow runs KILLED. Returns how many this orchestrator failed.

        The steps of ``optuna.storages.fail_stale_trials``, with the trial's ``status`` and
        ``detail`` written before its state (a finished trial's attributes cannot change). Callers
        hold the study's ``StudyLock``, so two orchestrators never fail the same trial; the storage
        still refuses a second FAIL (``UpdateFinishedTrialError``), which is not counted."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.storages._heartbeat import is_heartbeat_enabled
        from optuna.trial import TrialState

        storage = self.study._storage
        if not is_heartbeat_enabled(storage) or self.excused():
            return 0
        failed: list[Any] = []
        for trial_id in storage._get_stale_trial_ids(self.study._study_id) + self._orphans():
            try:
                storage.set_trial_user_attr(trial_id, "status", "interrupted")
                storage.set_trial_user_attr(trial_id, "detail", STALE_DETAIL)
                if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                    failed.append(storage.get_trial(trial_id))
            except UpdateFinishedTrialError:  # its orchestrator told it after all
                continue
        if failed:
            runs = self.tracker.trial_runs()
            for t in failed:
                for run in runs.get(t.number, []) or [self._new_run(t)]:
                    self.tracker.finish_trial(run.info.run_id, "interrupted", {}, {"detail": STALE_DETAIL}, [])
        return len(failed)

    def excused(self) -> bool:
        """Whether heartbeats may be missing because of an outage, not a dead orchestrator: this
        orchestrator lost the database less than a grace period ago, or the server (re)started
        less than one ago (then nobody could write a heartbeat while it was down)."""
        from orchestrator.store.outage import server_started_at
        from orchestrator.store.study import engine_of

        if self.outage is not None and self.outage.recently(self.grace_s):
            return True
        engine = engine_of(self.study._storage)
        up = self.outage.call(server_started_at, engine) if self.outage is not None else server_started_at(engine)
        return up is not None and up < 2 * self.grace_s

    def _orphans(self) -> list[int]:
        """RUNNING trials that never had a heartbeat, seen so in two checks a grace period apart:
        asked by an orchestrator that died before its first beat (or asked twice through a lost
        connection), they would otherwise stay RUNNING forever (Optuna's stale check skips them)."""
        import time

        from orchestrator.store.study import engine_of

        engine = engine_of(self.study._storage)
        if engine is None:
            return []
        silent = (self.outage.call(_silent_trials, engine, self.study._study_id) if self.outage is not None
                  else _silent_trials(engine, self.study._study_id))
        now = time.monotonic()
        self._silent = {i: self._silent.get(i, now) for i in silent}
        return [i for i, since in self._silent.items() if now - since >= self.grace_s]

    def _end_interrupted(self, t: Any, runs: list[Any]) -> None:
        import optuna
        from optuna.trial import TrialState

        trial = optuna.trial.Trial(self.study, t._trial_id)
        trial.set_user_attr("status", "interrupted")
        trial.set_user_attr("detail", INTERRUPTED_DETAIL)
        self.study.tell(t.number, state=TrialState.FAIL)
        for run in runs or [self._new_run(t)]:
            self.tracker.finish_trial(run.info.run_id, "interrupted", {}, {"detail": "orchestrator died"}, [])

    def _new_run(self, t: Any) -> Any:
        run_id = self.tracker.start_trial(t.number, t.params, {})
        return self.tracker.client.get_run(run_id)

    def _finish_from_record(self, run_id: str, t: Any, status: str) -> None:
        trial_dir = Path(t.user_attrs.get("trial_dir") or self.trial_dir(t.number))
        metrics = dict(t.user_attrs.get("metrics", {}))
        extra = {k: t.user_attrs.get(k) for k in (M.DURATION_S, "process_peak_rss_gib")}
        processes = int(t.user_attrs.get("processes", 1))
        result = _read_json(repeat_path(trial_dir, processes) / "result.json")  # the deciding process
        tags = run_tags(result, status, t.user_attrs.get("detail"))
        tags.update(trace_tags(t.user_attrs))
        self.tracker.finish_trial(run_id, status, run_metrics(metrics, result, extra), tags,
                                  trial_files(trial_dir, processes))

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
            params = t.params or t.system_attrs.get("fixed_params") or {}  # killed before suggest
            if params and is_attempt(t) and t.state in (TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED):
                last_attempt[config_key(params)] = t
        queued: dict[str, int] = {}
        superseded: dict[str, int] = {}
        first_new = len(trials)
        for key, t in last_attempt.items():
            if key in busy:
                continue
            status = t.user_attrs.get("status", "interrupted")
            if key in results:
                if results[key].user_attrs.get("status") not in retry:
                    continue
                t, status = results[key], results[key].user_attrs.get("status")
                superseded[key] = first_new
            elif status not in RUN_AGAIN:
                continue
            params = t.params or t.system_attrs.get("fixed_params")
            attrs = {"retry_of": t.number, "retry_reason": status}
            if "neighbour_of" in t.user_attrs:
                attrs["neighbour_of"] = t.user_attrs["neighbour_of"]
            self.study.enqueue_trial(params, user_attrs=attrs)
            busy.add(key)
            queued[status] = queued.get(status, 0) + 1
        return queued, superseded


def _silent_trials(engine: Any, study_id: int) -> set[int]:
    """RUNNING trials of the study without a row in Optuna's heartbeat table."""
    import sqlalchemy

    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text(
            "SELECT t.trial_id FROM trials t LEFT JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
            "WHERE t.study_id = :s AND t.state = 'RUNNING' AND h.trial_id IS NULL"), {"s": study_id})
        return {r[0] for r in rows}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
