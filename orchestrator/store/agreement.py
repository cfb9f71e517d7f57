"""Does MLflow hold what the study holds? The study (Optuna) is the source of truth; MLflow is the
record a person browses, written from it. Pure functions over what was read, without MLflow.

For each trial that has ended, MLflow should hold exactly one run, a child of the study's parent
run tagged with the trial's number, that ``record_of`` the trial describes: its status tag, its
terminal status (``runs.MLFLOW_STATUS``: ``FINISHED`` for ``ok``, ``oom``, ``swapped`` and
``skipped``, ``KILLED`` for ``interrupted``, else ``FAILED``), its searched parameters, the metrics
the study holds (as MLflow is given them: ``logged_metrics``) and the files of its trial folder. A trial in flight (a live orchestrator runs it, or told it a
moment ago and its writer thread is on it) is not compared. ``compare`` lists each
``Difference``; ``converge`` writes what they ask for. A study carries a mark
(``studyrecord.RECORDED_ATTR``): how many trials MLflow held in full when last compared, and where; a
finished study's command (``report.resume``) opens MLflow only when the mark does not match
(``recorded``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Any, Callable, Iterable

from orchestrator import metrics as M
from orchestrator import trialdir
from orchestrator.protocol import TrialResult, decode_result
from orchestrator.errors import first_line
from orchestrator.outcome import Status
from orchestrator.store.record import TrialRecord
from orchestrator.store.records import run_metrics, run_tags, trial_trace_tags
from orchestrator.store.studyrecord import StudyRecord
from orchestrator.store.runs import MLFLOW_STATUS, TERMINAL, logged_metrics, param_text

if TYPE_CHECKING:
    from mlflow.entities import Run
    from optuna.trial import FrozenTrial

KINDS = {  # kind -> what the line says is wrong, and whether `check --repair` repairs it
    "no_run": True, "duplicate_runs": True, "run_unfinished": True, "run_status": True, "status_tag": True,
    "metric": True, "param": True, "files": True, "orphan_run": True, "parent": True,
    "cut_off": True, "folder": False,
    "no_folder": True,  # written back from its run's copies (``repair.restore_folders``)
    "folder_files": True,  # the same, for files gone from a folder that is there
    "lost_folder": False,  # missing, and its run holds no copy to write back
    "unlisted": False,  # its run's files could not be listed: nothing known to repair (check again)
    "no_study": False,  # runs of a study deleted another way: `orchestrate delete SPEC --leftovers`
    "moved": True,  # MLflow's artifact locations name the folder this one was moved or copied from
}


@dataclass(frozen=True)
class Record:
    """What MLflow should hold for one ended trial, from the study (compared) and the trial's
    folder (read only when the record is written, or its files compared)."""

    number: int
    status: str
    run_status: str
    params: dict[str, str]
    """The searched parameters, as MLflow params (the run may hold the fixed ones too)."""
    metrics: dict[str, float]
    """What the study holds, as logged; ``all_metrics`` adds the trial folder's."""
    trial: TrialRecord
    trace: dict[str, str]
    """The trial's attributes that are tags of its run (``records.TRACE_ATTRS``)."""
    trial_dir: Path
    processes: int
    searched: dict[str, Any]

    @cached_property
    def result(self) -> TrialResult | None:
        """The deciding process's result file; None where it is missing or unreadable."""
        try:
            return decode_result((trialdir.repeat_path(self.trial_dir, self.processes) / trialdir.RESULT).read_text())
        except (OSError, ValueError, TypeError):
            return None

    @property
    def tags(self) -> dict[str, str]:
        tags = run_tags(self.result, self.status, self.trial.detail)
        tags.update(self.trace)
        return tags

    @property
    def all_metrics(self) -> dict[str, float]:
        return logged_metrics(run_metrics(dict(self.trial.metrics), self.result, _extra(self.trial)))

    @property
    def all_params(self) -> dict[str, Any]:
        """The run's parameters as the sweep logs them (the fixed ones too, from ``config.json``)."""
        return dict(_read_json(self.trial_dir / trialdir.CONFIG).get("params") or {}) or dict(self.searched)

    @property
    def files(self) -> list[tuple[Path, str | None]]:
        """The files of the trial's folder that exist, with their artifact folder."""
        return [(p, folder) for p, folder in trialdir.files(self.trial_dir, self.processes) if p.is_file()]


def record_of(trial: FrozenTrial, default_dir: Path) -> Record:
    """``trial``'s record (an Optuna ``FrozenTrial`` or a ``studyread.StoredTrial``);
    ``default_dir``: its folder when the study does not name one."""
    rec = TrialRecord.of(trial)
    status = rec.status_text or Status.INTERRUPTED.value
    return Record(trial.number, status, MLFLOW_STATUS.get(status, "FAILED"),
                  {k: param_text(v) for k, v in trial.params.items()},
                  logged_metrics(run_metrics(dict(rec.metrics), None, _extra(rec))), rec, trial_trace_tags(trial),
                  Path(rec.trial_dir or default_dir), rec.process_count, dict(trial.params))


def _extra(rec: TrialRecord) -> dict[str, Any]:
    return {M.DURATION_S: rec.duration_s, "process_peak_rss_gib": rec.process_peak_rss_gib}


@dataclass(frozen=True)
class Difference:
    kind: str
    """One of ``KINDS``."""
    text: str
    """What differs, for a person: ``trial 3: no MLflow run (the trial ended ok)``."""
    number: int | None = None
    """The trial it is about (None: the parent run, a folder)."""

    @property
    def repairable(self) -> bool:
        return KINDS[self.kind]


def compare(trials: Iterable[Any], runs: dict[int, list[Any]], default_dir: Callable[[int], Path],
            in_flight: AbstractSet[int] = frozenset(), folders: dict[int, Path] | None = None,
            artifacts: Callable[[str, str | None], set[str]] | None = None,
            lost: AbstractSet[int] = frozenset()) -> list[Difference]:
    """Every difference between the study's ``trials`` and MLflow's child ``runs`` (by trial
    number), skipping ``in_flight`` trial numbers and waiting trials. ``folders`` (trial number ->
    folder, as found on disk): a folder of no trial is a difference too, and so is a trial that ran
    whose folder is missing, but for the ``lost`` ones (``StudyRecord.lost_folders``). ``artifacts(run_id,
    folder)``: the file names a run holds in an artifact folder; given, missing files are
    differences (each is a call to MLflow: ``orchestrate check`` asks, the sweep does not). A
    trial that ran on another host (its ``host``) keeps its folder there: not looked for here."""
    out: list[Difference] = []
    numbers = set()
    for t in sorted(trials, key=lambda t: t.number):
        numbers.add(t.number)
        state = t.state.name
        if t.number in in_flight or state == "WAITING":
            continue
        if state == "RUNNING":
            out.append(Difference("cut_off", f"trial {t.number}: RUNNING in the study, but no orchestrator is "
                                  "running it (cut off)", t.number))
            continue
        out += _compare_trial(record_of(t, default_dir(t.number)), runs.get(t.number, []),
                              TrialRecord.of(t).mlflow_run_id, artifacts)
        rec = TrialRecord.of(t)
        ran_in = rec.trial_dir if rec.ran_here and t.number not in lost else None  # another host's: on its disk
        try:
            out += _folder_differences(t.number, rec, run_of(rec, runs.get(t.number, [])),
                                       ran_in if folders is not None else None, artifacts)
        except Unlisted as exc:
            out.append(Difference("unlisted", f"trial {t.number}: {exc}", t.number))
    for number in sorted(set(runs) - numbers):
        ids = ", ".join(r.info.run_id for r in runs[number])
        out.append(Difference("orphan_run", f"MLflow run(s) {ids} tagged trial_number={number}: the study has "
                              "no such trial", number))
    for number, folder in sorted((folders or {}).items()):
        if number not in numbers:
            out.append(Difference("folder", f"folder {folder}: the study has no trial {number} (nothing refers to "
                                  "it; move it aside if it is not yours)"))
    return out


def run_of(record: TrialRecord, runs: list[Any]) -> str | None:
    """The id of a trial's MLflow run: the one its record names, else the one of its ``runs`` (by
    its trial number) to keep. A run the writer thread made after the trial ended is not named (a
    finished trial's attributes are fixed: ``records.link_run``); on a loaded machine that was
    every few trials, and ``check`` then said the stores agreed about a folder whose files were
    deleted, and ``--repair`` did not write them back."""
    return record.mlflow_run_id or (keeper(runs, None).info.run_id if runs else None)


def _folder_differences(number: int, rec: TrialRecord, run_id: str | None, ran_in: str | None,
                        artifacts: Callable[[str, str | None], set[str]] | None) -> list[Difference]:
    """A trial's folder (``ran_in``: where it ran on this host, if folders are compared) gone, or
    lacking files its MLflow run holds."""
    if not ran_in:
        return []
    if not Path(ran_in).is_dir():
        missing = f"trial {number}: its folder {ran_in} is missing (its configuration, log and result are gone from disk"
        if _lacking(artifacts, rec, run_id, Path(ran_in)):  # what the run holds, all of it lacking
            return [Difference("no_folder", f"{missing}; its MLflow run keeps the copies it logged, which --repair "
                               "writes back)", number)]
        return [Difference("lost_folder", f"{missing}, and its MLflow run holds no copy of them)", number)]
    if lacking := _lacking(artifacts, rec, run_id, Path(ran_in)):
        return [Difference("folder_files", f"trial {number}: its folder {ran_in} lacks {', '.join(lacking)} (deleted "
                           "from disk, or damaged; its MLflow run keeps the copies it logged, which --repair writes "
                           "back)", number)]
    return []


def _lacking(artifacts: Callable[[str, str | None], set[str]] | None, record: TrialRecord, run_id: str | None,
             folder: Path) -> list[str]:
    """``lacking_files`` of a trial's folder (every copy its run holds, where the folder is gone), where
    MLflow can be asked (``artifacts`` not given: no MLflow experiment; none where the run is gone).
    Any other failure to list them is raised (``Unlisted``): it was "none lacking", and ``check``
    could say the stores agree about a folder whose files were deleted."""
    if artifacts is None or not run_id:
        return []
    try:
        return lacking_files(folder, record.process_count, lambda sub: artifacts(run_id, sub))
    except Exception as exc:  # noqa: BLE001 - the run itself gone (MLflow's error): nothing to write back
        if getattr(exc, "error_code", None) == "RESOURCE_DOES_NOT_EXIST":
            return []
        raise Unlisted(f"its MLflow run's files could not be listed ({first_line(exc)}); check again") from exc


class Unlisted(Exception):
    """A trial's MLflow run's files could not be listed: a difference of its own (``compare``)."""


def keeper(runs: list[Run], run_id: str | None) -> Run:
    """The one of a trial's runs to keep: the one the study names, else a finished one, else the first."""
    by_id = [r for r in runs if r.info.run_id == run_id]
    done = [r for r in runs if r.info.status in TERMINAL]
    return (by_id or done or sorted(runs, key=lambda r: r.info.start_time or 0))[0]


def _compare_trial(record: Record, runs: list[Any], run_id: str | None,
                   artifacts: Callable[[str, str | None], set[str]] | None) -> list[Difference]:
    n, ended = record.number, f"the trial ended {record.status}"
    if not runs:
        return [Difference("no_run", f"trial {n}: no MLflow run ({ended})", n)]
    out = []
    run = keeper(runs, run_id)
    if len(runs) > 1:
        out.append(Difference("duplicate_runs", f"trial {n}: {len(runs)} MLflow runs "
                              f"({', '.join(r.info.run_id for r in runs)}), one expected", n))
    if run.info.status not in TERMINAL:
        return out + [Difference("run_unfinished", f"trial {n}: its MLflow run {run.info.run_id} is "
                                 f"{run.info.status}, but {ended}", n)]
    if run.info.status != record.run_status:
        out.append(Difference("run_status", f"trial {n}: its MLflow run is {run.info.status}, "
                              f"{record.run_status} expected ({ended})", n))
    if run.data.tags.get("status") != record.status:
        out.append(Difference("status_tag", f"trial {n}: status {run.data.tags.get('status')!r} in MLflow, "
                              f"{record.status!r} in the study", n))
    metrics = [f"{k} {_shown(run.data.metrics.get(k))} in MLflow, {_shown(v)} in the study"
               for k, v in sorted(record.metrics.items()) if run.data.metrics.get(k) != v]
    if metrics:
        out.append(Difference("metric", f"trial {n}: metric " + "; ".join(metrics), n))
    params = [f"{k}={run.data.params.get(k, '(none)')} in MLflow, {v} in the study"
              for k, v in sorted(record.params.items()) if run.data.params.get(k) != v]
    if params:
        out.append(Difference("param", f"trial {n}: param " + "; ".join(params), n))
    if artifacts is not None and record.files:
        held: dict[str | None, set[str]] = {}
        missing = [str(path.name if folder is None else f"{folder}/{path.name}") for path, folder in record.files
                   if path.name not in held.setdefault(folder, artifacts(run.info.run_id, folder))]
        if missing:
            out.append(Difference("files", f"trial {n}: MLflow lacks its file(s) {', '.join(missing)}", n))
    return out


def lacking_files(trial_dir: Path, processes: int, held: Callable[[str | None], set[str]]) -> list[str]:
    """The files of an existing trial folder that are gone from it, or damaged (a JSON file that
    does not read as one: a fault tour's garbage in result.json was "agree"), but that its MLflow
    run holds (``held(artifact folder)``: the names there), as artifact paths (``repeat-2/result.json``)."""
    return [path.name if folder is None else f"{folder}/{path.name}" for path, folder in trialdir.files(trial_dir, processes)
            if (not path.is_file() or _damaged(path)) and path.name in held(folder)]


def _damaged(path: Path) -> bool:
    """A trial's JSON file that does not read as a JSON object."""
    if path.suffix != ".json":
        return False
    try:
        return not isinstance(json.loads(path.read_bytes()), dict)
    except (OSError, ValueError):
        return True


def _shown(value: float | None) -> str:
    return "missing" if value is None else f"{value:.7g}"


def recorded(study: Any, tracking_uri: str) -> bool:
    """Whether the study's mark says MLflow at ``tracking_uri`` holds every one of its trials
    (and, for an SQLite store, that store still holds that many finished runs under the parent):
    then a finished study's command need not open MLflow. Reads two small SQLite queries at most."""
    from orchestrator.redact import shown
    from orchestrator.urls import absolute_uri, sqlite_path

    mark = StudyRecord.of(study).recorded
    uri = absolute_uri(tracking_uri)
    if not isinstance(mark, dict) or mark.get("tracking_uri") != shown(uri) or \
            mark.get("trials") != len(study.trials):
        return False
    path = sqlite_path(uri)
    if path is None:
        return True
    return _finished_runs(path, str(mark.get("parent_run_id"))) == (mark["trials"],) * 2


def _finished_runs(path: Path, parent: str) -> tuple[int, int] | None:
    """(finished child runs of ``parent``, distinct trial numbers among them) in an MLflow SQLite
    store, read-only; None when it cannot be read (then MLflow itself is asked)."""
    import sqlite3

    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(
                "SELECT count(*), count(DISTINCT n.value) FROM runs r "
                "JOIN tags p ON p.run_uuid = r.run_uuid AND p.key = 'mlflow.parentRunId' AND p.value = ? "
                "JOIN tags n ON n.run_uuid = r.run_uuid AND n.key = 'trial_number' "
                "WHERE r.lifecycle_stage = 'active' AND r.status IN ('FINISHED', 'FAILED', 'KILLED')",
                (parent,)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
