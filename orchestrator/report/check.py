"""``orchestrate check SPEC``: do the study, the MLflow experiment and the trial folders agree?

Read-only: the study is read as ``report`` reads it (``studyread``), MLflow through its client
(nothing is created: a store or experiment that is not there holds no runs), the trial folders
from disk. Each difference ``agreement.compare`` finds is one line (a missing run, a run RUNNING
for a trial that ended, a status or metric that differs, a file MLflow lacks, a run or a folder of
no trial, the study's parent run missing or left RUNNING), then how many and the command that
repairs them: ``orchestrate check SPEC --repair``, which does what a sweep's start does
(``store.repair``: MLflow written from the study, which is the source of truth; trials cut off by
a dead orchestrator ended as interrupted), then checks again. Exit 0 when they agree, 1 when they
differ. A sweep running meanwhile is noted, and its trials in flight (and those it told less than
``search.grace_period_s`` ago) are not compared. SQLite and PostgreSQL studies, SQLite stores
and tracking servers alike; torch is never imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import exits, trialdir
from orchestrator.errors import OrchestratorError, StudyError, UsageParser, first_line, print_error
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec, load_guarded
from orchestrator.store.agreement import Difference, compare
from orchestrator.report.live import running_now
from orchestrator.store.record import TrialRecord
from orchestrator.urls import STORAGE_HELP, TRACKING_HELP, absolute_uri, sqlite_path

if TYPE_CHECKING:
    from mlflow.entities import Experiment
    from optuna import Study

SHOWN_PER_KIND = 20  # lines of one kind before "... and N more"


def _parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="orchestrate check", description=(
        "Compare the study, its MLflow experiment and its trial folders (read-only); print each "
        "difference. Exit 0 when they agree, 1 when they differ."))
    p.add_argument("spec", help="the sweep spec, e.g. sweeps/bert_tiny.yaml")
    p.add_argument("--storage", help=STORAGE_HELP)
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.add_argument("--repair", action="store_true", help="write MLflow's missing or wrong records from the "
                   "study (the source of truth), end trials cut off by a dead orchestrator, as a sweep's "
                   "start does, and write back trial folders gone from disk from their MLflow runs' copies; "
                   "then check again")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv[1:])
    try:
        from orchestrator.report.command import open_study
        spec, origins = load_guarded(args.spec, args.storage, args.tracking_uri)
        from orchestrator.report.closing import check_store_files

        repair = check_store_files(spec, origins)
        study = open_study(spec, "check")
        if args.repair:
            restored: list[str] = []
            repaired = _repair(spec, restored)
            print(f"orchestrate check: {repaired} trial(s)' MLflow records written from the study" if repaired else
                  "orchestrate check: MLflow held every trial's records: none written")
            for line in restored:
                print(f"orchestrate check: {line}")
            study = open_study(spec, "check")
        head, found = inspect(spec, study)
        print("\n".join(head))
        for line in _lines(found):
            print(f"  {line}")
        if not found:
            print("The study, MLflow and the trial folders agree.")
            return exits.OK
        print(f"{len(found)} difference(s)." + (f" Repair: {repair}" if any(d.repairable for d in found) else ""))
        return exits.DIFFERS
    except OrchestratorError as exc:
        return print_error(exc)


def inspect(spec: SweepSpec, study: Any) -> tuple[list[str], list[Difference]]:
    """The header lines and every difference between the spec's study and the rest. MLflow and
    the folders are read first, the study (again) last: a sweep running meanwhile creates a trial
    before its run and its folder, so nothing read is newer than the study it is compared with."""
    from orchestrator.report.command import open_study
    from orchestrator.store.repair import artifacts
    from orchestrator.store.studyrecord import StudyRecord

    uid = StudyRecord.of(study).uid
    if uid is None:
        raise StudyError(f"study {spec.name!r} in {shown(absolute_uri(spec.storage))} was not created by orchestrate")
    client, experiment, parent, runs = _mlflow(spec, uid)
    roots = _folder_roots(study, spec.name, uid)
    folders = {n: p for root in roots for p in (root.iterdir() if root.is_dir() else [])
               if (n := trialdir.number_of(p)) is not None}
    root = roots[0]
    study = open_study(spec, "check")
    live, in_flight = running_now(spec, study)
    moved = _moved(spec, experiment)
    lost = StudyRecord.of(study).lost_folders or {}
    found = compare(study.trials, runs, lambda n: trialdir.folder(root, n), in_flight, folders,
                    artifacts(client) if client is not None and moved is None else None, {int(n) for n in lost})
    if moved is not None:  # the runs' files are beside the store, where MLflow is not told to look
        found.insert(0, moved)
    from orchestrator.report.delete import no_study

    found += no_study(spec, uid)  # runs a study deleted another way left in the experiment
    if study.trials and parent is None:
        found.insert(0, Difference("parent", f"MLflow has no parent run for the study (tag study_uid={uid})"))
    elif parent is not None and parent.info.status not in ("FINISHED", "FAILED", "KILLED") and not live:
        found.insert(0, Difference("parent", f"the study's MLflow parent run {parent.info.run_id} is "
                                   f"{parent.info.status}, but no orchestrator is running the study"))
    n_runs = sum(len(r) for r in runs.values())
    where = (f"experiment {spec.name!r}, {n_runs} trial run(s)" if experiment is not None
             else f"no experiment {spec.name!r}")
    head = [f"Study:   {spec.name!r}, {len(study.trials)} trial(s), in {shown(absolute_uri(spec.storage))}",
            f"Runs:    {where}, in {shown(absolute_uri(spec.tracking_uri))}",
            f"Folders: {len(folders)} trial folder(s) in " + (str(root) if len(roots) == 1 else
                                                               f"{len(roots)} places: {', '.join(map(str, roots))}")]
    if lost:
        head.append(f"  (trial folder(s) of trial(s) {', '.join(lost)} lost for good, with no copy in MLflow, as "
                    "check --repair recorded: not compared; their results stay in the study)")
    if live:
        head.append(f"  ({live}: its trials in flight, and those told in the last search.grace_period_s="
                    f"{spec.search.grace_period_s:g} s, are not compared)")
    return head, found


def _moved(spec: SweepSpec, experiment: Experiment | None) -> Difference | None:
    """MLflow's artifact locations naming the folder this project was moved or copied from
    (``store.moved``; ``--repair`` and the next sweep point them here)."""
    from orchestrator.store.moved import artifacts_elsewhere

    old = artifacts_elsewhere(absolute_uri(spec.tracking_uri), spec.name, experiment.artifact_location
                              if experiment is not None else None)
    return None if old is None else Difference(
        "moved", f"MLflow's experiment {spec.name!r} keeps its runs' files in {old}, not beside its store "
        "(was this folder moved or copied from there?)")


def _lines(found: list[Difference]) -> list[str]:
    out: list[str] = []
    per_kind: dict[str, int] = {}
    for d in found:
        per_kind[d.kind] = per_kind.get(d.kind, 0) + 1
        if per_kind[d.kind] <= SHOWN_PER_KIND:
            out.append(d.text)
    out += [f"... and {n - SHOWN_PER_KIND} more of this kind ({kind})" for kind, n in per_kind.items()
            if n > SHOWN_PER_KIND]
    return out


def _mlflow(spec: SweepSpec, uid: str) -> tuple[Any, Any, Any, dict[int, list[Any]]]:
    """MLflow's client, the experiment, the study's parent run and its child runs by trial number,
    read without creating anything (no store, no experiment: None and no runs)."""
    uri = absolute_uri(spec.tracking_uri)
    if (path := sqlite_path(uri)) is not None and not path.is_file():
        return None, None, None, {}
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from orchestrator.store.runs import child_runs
    from orchestrator.store.tracking import quiet_mlflow_logs

    quiet_mlflow_logs()
    try:
        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(spec.name)
        if experiment is None:
            return client, None, None, {}
        parents = client.search_runs([experiment.experiment_id], max_results=1, order_by=["attributes.start_time ASC"],
                                     filter_string=f"tags.role = 'sweep' and tags.study_uid = '{uid}'")
        if not parents:
            return client, experiment, None, {}
        return client, experiment, parents[0], child_runs(client, experiment.experiment_id, parents[0].info.run_id)
    except Exception as exc:  # noqa: BLE001 - a damaged or refusing store is one line; the rest as before
        from orchestrator.store.writefault import named, unwritable

        if (found := unwritable(named("MLflow's store", uri), exc)) is not None:
            raise found from None
        if isinstance(exc, MlflowException):
            raise StudyError(f"tracking_uri {shown(uri)}: {first_line(exc, typed=False)}") from None
        raise


def _folder_roots(study: Study, name: str, uid: str) -> list[Path]:
    """Where this host's trial folders of the study are: as its trials that ran here name them (a
    shared study run from several folders of one host has several places: the header named the
    first alone), else under ``./mlruns`` (another host's are on its own disk)."""
    roots = {Path(rec.trial_dir).parent: None for t in study.trials
             if (rec := TrialRecord.of(t)).trial_dir and rec.ran_here}
    return list(roots) or [trialdir.root(name, uid)]


def _repair(spec: SweepSpec, restored: list[str]) -> int:
    from orchestrator.report.closing import parent_close, target_of
    from orchestrator.search.space import make_plan, plan_device
    from orchestrator.store.repair import repair

    device = plan_device(spec)
    _, target = target_of(spec, make_plan(spec, device))

    def close(study: Study) -> tuple[str, str, dict[str, float]]:
        from orchestrator.store.records import result_trials

        done = len(result_trials(study)) >= target
        return parent_close(spec, study.get_trials(deepcopy=False), target, status="FINISHED" if done else "KILLED")
    return repair(spec, close, files=True, restored=restored, alone="check --repair")


if __name__ == "__main__":
    sys.exit(main(["check", *sys.argv[1:]]))
