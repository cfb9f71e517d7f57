"""Writing MLflow's records from the study, without running anything: for a finished study whose
mark says MLflow may lack some (``report.resume``), and for ``orchestrate check --repair``.

It does what a sweep's start does (``recovery.Recovery.recover``: trials cut off by a dead
orchestrator are ended as interrupted; MLflow is converged to the study), then closes the study's
parent run and, for an SQLite study, marks the study (``converge.mark``). No probe, no device, no
trial; MLflow and Optuna are imported, torch is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, cast

from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec
from orchestrator.urls import is_sqlite

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient
    from optuna import Study

    from orchestrator.store.outage import Outage, RetryingClient


def repair(spec: SweepSpec, close: Callable[[Any], tuple[str, str, dict[str, float]]], files: bool = False,
           restored: list[str] | None = None, alone: str | None = None) -> int:
    """Repair the spec's study's MLflow records; returns how many trials' records were written.
    ``close(study)``: the parent run's status, description and metrics; ``files``: compare each
    run's files too (a call to MLflow per run and folder), and write back each trial folder gone
    from disk from its run's copies (``restore_folders``; what it says appended to ``restored``,
    given). An SQLite study is locked
    meanwhile (a sweep running on it refuses, as a second sweep does: ``study.study_lock``).
    Raises ``writefault.StoreUnwritable`` when MLflow still refuses a write."""
    from orchestrator import trialdir
    from orchestrator.store.converge import mark
    from orchestrator.store.moved import moved_lines
    from orchestrator.store.coordination import StudyLock, is_shared
    from orchestrator.store.recovery import Recovery
    from orchestrator.store.study import load_study, study_lock
    from orchestrator.store.studyrecord import StudyRecord, write_study
    from orchestrator.store.tracking import Tracker
    from orchestrator.urls import absolute_uri

    shared = is_shared(spec.storage)
    with study_lock(spec.storage, spec.name, alone):  # alone: the command to name where a sweep holds it
        study = load_study(spec.storage, spec.name, spec.search.grace_period_s)
        tracker = Tracker(spec.tracking_uri, spec.name, _outage(spec), swept=tuple(spec.space))
        if restored is not None:
            restored += moved_lines(tracker.moved, spec.tracking_uri)
        uid = cast(str, StudyRecord.of(study).uid)  # a study orchestrate made has its uid (open_study writes it)
        if shared:  # other orchestrators may be running it: its parent run is theirs to close
            created = _find_parent(tracker, spec, uid)
        else:
            tracker.open_parent(spec.name, shown(absolute_uri(spec.storage)), spec.path, uid)
            created = True
        if StudyRecord.of(study).parent_run_id != tracker.parent_id:
            write_study(study, parent_run_id=tracker.parent_id)
        recovery = Recovery(study, tracker, trialdir.root(spec.name, uid), shared, spec.search.grace_period_s)
        with StudyLock(spec.storage, spec.name):
            recovery.recover(artifacts=artifacts(tracker.client) if files else None)
        if files:
            lost: dict[str, str] = {}
            lines = restore_folders(study, tracker.client, tracker.trial_runs(), lost)
            lines += record_lost(study, lost)
            if restored is not None:
                restored.extend(lines)
        if created:
            tracker.close_parent(*close(study))
        if not shared:
            mark(study, spec.tracking_uri, tracker.parent_id, len(study.get_trials(deepcopy=False)))
    return recovery.repaired


def restore_folders(study: Study, client: MlflowClient | RetryingClient, runs: dict[int, list[Any]] | None = None,
                    lost: dict[str, str] | None = None) -> list[str]:
    """Each finished trial's folder that is gone from disk (deleted by hand, say), written back from
    the copies its MLflow run logged (its configuration, result and log): downloaded into
    ``.trial-NNNN.restoring`` beside it (one a killed repair left is removed first), then renamed
    into place, so no half folder is ever under its name. Returns the lines to print: how many were
    written back, and one per folder that could not be (the OS's reason). A run without those
    copies, or gone from MLflow, leaves its folder missing (``check`` says so). A trial whose record
    names no run (its run made after it ended, on a loaded machine) has its run found among ``runs``
    (by trial number: ``agreement.run_of``). ``lost``, given, gets each folder that ran here, is gone,
    and has no copy to be written back from: {trial number (text): folder}."""
    import os
    import shutil
    from pathlib import Path

    from mlflow.exceptions import MlflowException

    from orchestrator.store.record import TrialRecord

    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # a command's output is its own lines
    from orchestrator.store.agreement import lacking_files, run_of

    restored, filled, lines = 0, 0, []
    for t in study.get_trials(deepcopy=False):
        record = TrialRecord.of(t)
        folder = Path(record.trial_dir) if record.trial_dir else None
        if folder is None or not t.state.is_finished():
            continue
        run_id = run_of(record, (runs or {}).get(t.number, []))
        part = folder.with_name(f".{folder.name}.restoring")
        whole = not folder.is_dir()
        try:
            files = lacking_files(folder, record.process_count,  # a second process's under repeat-2/
                                  lambda sub: {Path(f.path).name for f in client.list_artifacts(run_id, sub)}
                                  ) if run_id else []
            if not files or not run_id:
                if whole and record.ran_here and lost is not None:  # no run, or no copy in it: nothing to write back
                    lost[str(t.number)] = str(folder)
                continue
            shutil.rmtree(part, ignore_errors=True)  # what a killed repair left
            part.mkdir(parents=True)  # as the sweep makes a trial folder: the umask's mode
            for name in files:
                (part / name).parent.mkdir(exist_ok=True)
                client.download_artifacts(run_id, name, str((part / name).parent))
            if whole:
                os.rename(part, folder)
            for name in ([] if whole else files):  # each file whole, or not at all
                (folder / name).parent.mkdir(exist_ok=True)
                os.rename(part / name, folder / name)
        except MlflowException as exc:  # the run gone from MLflow: nothing to write back from
            if whole and record.ran_here and lost is not None and exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                lost[str(t.number)] = str(folder)
            continue
        except OSError as exc:
            named = exc.filename2 or exc.filename  # a rename's: the path in the way, not the download's
            where = f" ({named})" if named and str(named) != str(folder) else ""
            lines.append(f"trial {t.number}'s folder {folder} could not be written back: {exc.strerror or exc}{where}")
            continue
        finally:
            shutil.rmtree(part, ignore_errors=True)
        restored, filled = restored + whole, filled + (not whole)
    if filled:
        lines.insert(0, f"{filled} trial folder(s) given back the files deleted from them, from their MLflow runs' copies")
    if restored:
        lines.insert(0, f"{restored} trial folder(s) written back from their MLflow runs' copies (configuration, "
                        "result and log)")
    return lines


def record_lost(study: Study, lost: dict[str, str]) -> list[str]:
    """Trial folders gone with no copy to write back (``restore_folders``'s ``lost``) recorded in the
    study (``StudyRecord.lost_folders``), so that ``check`` no longer counts them: it exited 1 for
    good. Returns the line to print where one is new."""
    from orchestrator.store.studyrecord import StudyRecord, write_study

    known = StudyRecord.of(study).lost_folders or {}
    new = {n: folder for n, folder in lost.items() if n not in known}
    if not new:
        return []
    write_study(study, lost_folders={**known, **new})
    return [f"{len(new)} trial folder(s) gone from disk with no copy in MLflow to write back (trial(s) "
            f"{', '.join(new)}): recorded as lost for good, their results kept in the study; check no "
            "longer counts them"]


def _find_parent(tracker: Any, spec: SweepSpec, uid: str) -> bool:
    """The study's parent run, found as it is (``tracker.parent_id``), or created: True then."""
    runs = tracker.client.search_runs([tracker.experiment_id], max_results=1, order_by=["attributes.start_time ASC"],
                                      filter_string=f"tags.role = 'sweep' and tags.study_uid = '{uid}'")
    if runs:
        tracker.parent_id = runs[0].info.run_id
        return False
    from orchestrator.urls import absolute_uri

    tracker.open_parent(spec.name, shown(absolute_uri(spec.storage)), spec.path, uid)
    return True


def artifacts(client: Any) -> Callable[[str, str | None], set[str]]:
    """The file names a run holds in an artifact folder (``agreement.compare``'s ``artifacts``)."""
    from pathlib import Path

    return lambda run_id, folder: {Path(f.path).name for f in client.list_artifacts(run_id, folder)}


def _outage(spec: SweepSpec) -> Outage | None:
    """A tracking server's lost connection is waited out, as in a sweep (``outage.Outage``)."""
    if is_sqlite(spec.tracking_uri):
        return None
    from orchestrator.store.outage import Outage

    return Outage(f"the tracking store {shown(spec.tracking_uri)}", spec.search.outage_s)
