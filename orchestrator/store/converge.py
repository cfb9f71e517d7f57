"""MLflow converged to the study: what ``agreement.compare`` finds missing or wrong is written.

Every run of ``orchestrate SPEC`` converges: at start (``recovery.Recovery.recover``), at the end
(``settle``: the records MLflow refused during the sweep, once the writer thread is drained), and
for a finished study, whose command otherwise opens nothing, when the study's mark says MLflow
may lack something (``store.repair``, which ``orchestrate check --repair`` runs too). Each repair
is idempotent: a run that dies half-way leaves what the next one finishes.

Per trial: a missing run is created (its parameters from the trial folder's ``config.json``, else
the study); a run that is not finished, or whose status, status tag, metrics or files differ, is
finished again from the record (metrics, tags, files, terminal status); a missing parameter is
logged; one that differs (MLflow's are write-once), or a second run of the same trial, is deleted
(MLflow keeps deleted runs restorable) and the record written once. A run of no trial is deleted;
the run the study names for a trial (``mlflow_run_id``), deleted by hand, is restored, and so is a trial's
run that an earlier repair wrote (a told trial's attributes are fixed, so the study cannot name it:
it is found among the parent run's deleted children by its ``trial_number`` tag).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Any, Callable

from orchestrator.redact import shown
from orchestrator.store.agreement import Difference, compare, keeper, record_of
from orchestrator.store.record import TrialRecord
from orchestrator.store.studyrecord import write_study
from orchestrator.store.writefault import StoreUnwritable

if TYPE_CHECKING:
    from orchestrator.store.tracking import Tracker
    from optuna import Study


@dataclass
class Converged:
    """What a converge did: trials whose record was written or repaired, and those still missing."""

    repaired: set[int] = field(default_factory=set)
    lacked: set[int] = field(default_factory=set)
    """The repaired trials MLflow lacked a record of, or held a wrong one: not a run left RUNNING by
    a killed orchestrator (closed as its trial was ended), nor a run of no trial (deleted)."""
    missing: set[int] = field(default_factory=set)
    refused: StoreUnwritable | None = None
    """Why some are still missing: MLflow refused a write (a full disk, say)."""
    left: list[Difference] = field(default_factory=list)
    """Differences converging does not repair (a trial cut off, a folder of no trial)."""


def converge(tracker: Tracker, trials: list[Any], default_dir: Callable[[int], Path], in_flight: AbstractSet[int] = frozenset(),
             runs: dict[int, list[Any]] | None = None, artifacts: Any = None) -> Converged:
    """Write what MLflow lacks of ``trials``' records through ``tracker`` (``tracking.Tracker``,
    its parent run open). Stops at the first write MLflow refuses: the rest is ``missing``."""
    runs = tracker.trial_runs() if runs is None else runs
    by_number = {t.number: t for t in trials}
    found = compare(trials, runs, default_dir, in_flight, artifacts=artifacts)
    out = Converged(left=[d for d in found if d.kind in ("cut_off", "folder")])
    wrong: dict[int, list[Difference]] = {}
    for d in found:
        if d.kind not in ("cut_off", "folder") and d.number is not None:
            wrong.setdefault(d.number, []).append(d)
    for number, diffs in sorted(wrong.items()):
        if out.refused is not None:
            out.missing.add(number)
            continue
        try:
            if number in by_number:
                trial = by_number[number]
                _repair(tracker, record_of(trial, default_dir(number)), runs.get(number, []),
                        TrialRecord.of(trial).mlflow_run_id, {d.kind for d in diffs})
                if {d.kind for d in diffs} - {"run_unfinished"}:
                    out.lacked.add(number)
            else:  # a run of no trial
                for run in runs.get(number, []):
                    tracker.client.delete_run(run.info.run_id)
            out.repaired.add(number)
        except StoreUnwritable as exc:
            out.refused = exc
            out.missing.add(number)
    return out


def _repair(tracker: Tracker, record: Any, runs: list[Any], run_id: str | None, kinds: set[str]) -> None:
    if not runs and run_id:  # the run the study names was deleted: restored, the study's link holds
        runs = _restored(tracker, run_id)
    if not runs:  # a run an earlier repair wrote (the study cannot name it: a told trial is fixed), deleted
        runs = _restored_child(tracker, record.number)
    keep = keeper(runs, run_id) if runs else None
    if keep is not None and "param" in kinds and any(k in keep.data.params for k in record.params):
        keep = None  # a parameter differs: MLflow's are write-once, so the run is written again
    for run in runs:
        if keep is None or run.info.run_id != keep.info.run_id:
            tracker.client.delete_run(run.info.run_id)
    if keep is None:
        new = tracker.start_trial(record.number, record.all_params, {"device": str(record.all_params.get(
            "device", ""))} if record.all_params.get("device") else {})
    else:
        new = keep.info.run_id
        missing = {k: v for k, v in record.all_params.items() if k not in keep.data.params}
        if missing:
            from mlflow.entities import Param

            from orchestrator.store.runs import param_text

            tracker.client.log_batch(new, params=[Param(k, param_text(v)) for k, v in sorted(missing.items())])
    tracker.finish_trial(new, record.status, record.all_metrics, record.tags, record.files)


def _restored(tracker: Tracker, run_id: str) -> list[Any]:
    """[the run ``run_id``], restored if it was deleted; [] where the store has no such run."""
    from mlflow.exceptions import MlflowException

    try:
        run = tracker.client.get_run(run_id)
        if run.info.lifecycle_stage == "deleted":
            tracker.client.restore_run(run_id)
            run = tracker.client.get_run(run_id)
    except MlflowException:
        return []
    return [run]


def _restored_child(tracker: Tracker, number: int) -> list[Any]:
    """[trial ``number``'s deleted run under the study's parent run, restored], or []."""
    from mlflow.entities import ViewType

    deleted = tracker.client.search_runs(
        [tracker.experiment_id], run_view_type=ViewType.DELETED_ONLY, max_results=20,
        filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_id}' and tags.trial_number = '{number}'")
    if not deleted:
        return []
    run = keeper(deleted, None)
    tracker.client.restore_run(run.info.run_id)
    return [tracker.client.get_run(run.info.run_id)]


def mark(study: Study, tracking_uri: str, parent_id: str | None, trials: int) -> None:
    """Set the study's mark (``studyrecord.RECORDED_ATTR``): MLflow holds all ``trials`` trials. A
    study that cannot take it stays unmarked: the next finished-study command compares again."""
    from orchestrator.urls import absolute_uri

    try:
        write_study(study, recorded={"tracking_uri": shown(absolute_uri(tracking_uri)),
                                     "parent_run_id": parent_id, "trials": trials})
    except StoreUnwritable:
        pass


@dataclass
class Settled:
    """How a sweep's records ended (``settle``)."""

    repaired: int
    """Trials whose MLflow record this run wrote or repaired from the study (at start or end)."""
    missing: int
    """Trials whose MLflow record is still missing or wrong."""
    parent_open: bool = False
    """The study's parent run could not be closed."""
    refused: StoreUnwritable | None = None

    @property
    def incomplete(self) -> bool:
        return bool(self.missing or self.parent_open)

    def lines(self) -> list[str]:
        """The summary's lines about MLflow: what was repaired, what is still missing."""
        out = []
        if self.repaired:
            out.append(f"MLflow: {self.repaired} trial(s)' records repaired from the study.")
        if self.incomplete:
            why = f" ({self.refused.cause})" if self.refused is not None else ""
            what = (f"{self.missing} trial(s)' records missing" if self.missing else
                    "the study's parent run could not be closed")
            out.append(f"MLflow: {what}{why}; the study holds every result, and the next run of this command "
                       "writes them to MLflow once its store can be written (exit code 75 until then).")
        return out


def settle(tracker: Any, recovery: Any, close: tuple[str, str, dict[str, float]], shared: bool) -> Settled:
    """The end of a sweep: drain the writer thread (``tracking.AsyncTracker``), write what MLflow
    refused during the sweep if it takes it now (``recovery.converge``: every trial of an SQLite
    study; with a server database, only the ones refused here), close the parent run (``close``:
    its status, description and metrics), and mark an SQLite study when MLflow holds all of it
    (its finished command reads the mark: ``agreement.recorded``)."""
    import sys

    if not tracker.close():
        print("orchestrate: MLflow did not take every record in time; the next run repairs it", file=sys.stderr)
    sync = tracker.sync
    try:
        done = recovery.converge(set(tracker.missing) if shared else None)
    except StoreUnwritable as exc:  # reading the runs back
        return Settled(recovery.repaired, max(len(tracker.missing), 1), True, exc)
    refused = done.refused
    parent_open = False
    if refused is None:
        try:
            sync.close_parent(*close)
        except StoreUnwritable as exc:
            refused, parent_open = exc, True
    else:
        parent_open = True
    if not shared and refused is None:
        mark(recovery.study, sync.uri, sync.parent_id, len(recovery.study.get_trials(deepcopy=False)))
    return Settled(recovery.repaired, len(done.missing), parent_open, refused)


def abandon(tracker: Any, trials: Path | None = None) -> None:
    """A sweep stopped by a failure (the study's store refused a write, say): MLflow gets what it
    can of the records queued, for 30 s at most, and the parent run is marked KILLED; whatever it
    misses, the next run writes from the study. Given ``trials`` (the study's trial folders, a study
    no other orchestrator runs), each trial run still RUNNING under the parent (the trials in
    flight, whose results the study could not take) is ended as interrupted too, with its folder's
    files: where the study file was lost, no next run of it comes to repair them, and they stayed
    RUNNING for good."""
    from orchestrator import trialdir
    from orchestrator.outcome import Status

    tracker.close(timeout_s=30)
    sync = tracker.sync
    try:
        running = [run for runs in (sync.trial_runs().values() if trials is not None else ()) for run in runs
                   if run.info.status == "RUNNING"]
        for run in running:
            folder = trialdir.folder(trials, int(run.data.tags["trial_number"]))  # type: ignore[arg-type]  # set: running is empty else
            sync.finish_trial(run.info.run_id, Status.INTERRUPTED, {}, {"detail": ABANDONED},
                              trialdir.files(folder) if folder.is_dir() else [])
        sync.client.set_terminated(sync.parent_id, "KILLED")
    except Exception:  # noqa: BLE001 - best effort: the next run's start repairs the runs
        pass


ABANDONED = "the sweep stopped while it ran: the study could not take its result"
