"""``orchestrate delete SPEC``: delete a study and everything it left: its MLflow runs, its trial
folders, and the runs of no study that an earlier study of the same name left behind.

What goes is said first, with the stores named (passwords masked), and deleted once the user
answers ``y`` (``--yes`` for a script; a closed stdin deletes nothing). ``--leftovers`` deletes
only what belongs to no study (``store.leftovers``), the study and its runs kept. A study that an
orchestrator is running now is refused: its SQLite lock is held, or, on a server database, one of
its trials has a heartbeat younger than ``search.grace_period_s``.

The order keeps every step repeatable: the MLflow runs (each study's trial runs, then its parent
run), then the trial folders, then the study itself. Cut off half-way, the same command deletes
what is left; ``orchestrate check`` meanwhile says what is missing. MLflow's deletion is its own:
the runs leave its UI and every search, and ``mlflow gc`` purges them and their artifacts. The
experiment stays (MLflow keeps a deleted experiment's name, which would refuse the spec's next run).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from orchestrator import exits, trialdir
from orchestrator.errors import OrchestratorError, StudyError, UsageParser, first_line, print_error
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec, load_guarded
from orchestrator.urls import STORAGE_HELP, TRACKING_HELP, absolute_uri


def _parser() -> argparse.ArgumentParser:
    p = UsageParser(prog="orchestrate delete", description=(
        "Delete the spec's study, its MLflow runs and its trial folders, and the MLflow runs of no "
        "study that an earlier study of the same name left; says what goes and asks first."))
    p.add_argument("spec", help="the sweep spec, e.g. sweeps/bert_tiny.yaml")
    p.add_argument("--storage", help=STORAGE_HELP)
    p.add_argument("--tracking-uri", help=TRACKING_HELP)
    p.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    p.add_argument("--leftovers", action="store_true",
                   help="delete only the MLflow runs and trial folders that belong to no study (what "
                        "`orchestrate check` flags); keep the study and its runs")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv[1:])
    try:
        spec, origins = load_guarded(args.spec, args.storage, args.tracking_uri)
        from orchestrator.report.closing import check_store_files

        check_store_files(spec, origins, absolute=True)  # a damaged file: one line with what to do, nothing deleted
        plan = Plan.of(spec, leftovers_only=args.leftovers)
        print("\n".join(plan.lines()))
        if plan.empty:
            return exits.OK
        if not args.yes:
            answer = ask()
            if answer is None:
                print("\norchestrate delete: no answer (stdin is closed); nothing deleted. Pass --yes to "
                      "delete without asking", file=sys.stderr)
                return exits.USAGE
            if not answer:
                print("Nothing deleted.")
                return exits.OK
        for line in plan.run():
            print(line, flush=True)
        return exits.OK
    except OrchestratorError as exc:
        return print_error(exc)


def ask() -> bool | None:
    """Whether the user answers ``y``; None where stdin is closed (no answer)."""
    print("Delete? [y/N] ", end="", flush=True)
    line = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(line.strip())  # what a pipe answered, where a terminal would have echoed it
    return None if not line else line.strip().lower() in ("y", "yes")


class Plan:
    """What ``delete`` deletes, read before anything is."""

    def __init__(self, spec: SweepSpec, study: Any, uid: str | None, mine: Any, none: list[Any],
                 folders: list[Path], leftovers_only: bool) -> None:
        self.spec, self.study, self.uid, self.mine, self.none = spec, study, uid, mine, none
        self.folders, self.leftovers_only = folders, leftovers_only
        self.client: Any = None

    @classmethod
    def of(cls, spec: SweepSpec, leftovers_only: bool = False) -> "Plan":
        from orchestrator.store.leftovers import groups, open_experiment
        from orchestrator.store.studyread import read_study
        from orchestrator.store.studyrecord import StudyRecord

        study = read_study(absolute_uri(spec.storage), spec.name)
        uid = StudyRecord.of(study).uid if study is not None else None
        if study is not None and not leftovers_only:
            refuse_if_running(spec, study)
        try:
            client, experiment = open_experiment(spec.tracking_uri, spec.name)
            mine, none = groups(client, experiment.experiment_id, spec.storage, uid) if experiment else (None, [])
        except Exception as exc:  # noqa: BLE001 - an MLflow or driver error: one line, nothing deleted
            raise StudyError(f"tracking_uri {shown(absolute_uri(spec.tracking_uri))}: {first_line(exc, typed=False)}; "
                             "nothing deleted") from None
        if leftovers_only:
            study, mine = None, None
        uids = [g.uid for g in none if g.uid] + ([uid] if study is not None and uid else [])
        folders = [f for u in uids for f in _folders(spec, study if u == uid else None, u) if f.is_dir()]
        plan = cls(spec, study, uid, mine, none, folders, leftovers_only)
        plan.client = client
        return plan

    @property
    def empty(self) -> bool:
        return self.study is None and self.mine is None and not self.none and not self.folders

    def lines(self) -> list[str]:
        storage, tracking = shown(absolute_uri(self.spec.storage)), shown(absolute_uri(self.spec.tracking_uri))
        name = self.spec.name
        if self.empty:
            what = "runs of no study" if self.leftovers_only else "study, runs or trial folders"
            return [f"orchestrate delete: nothing to delete: no {what} of {name!r} in {storage} and {tracking}"]
        out = [f"orchestrate delete: this deletes, for {name!r}:"]
        if self.study is not None:
            out.append(f"  the study ({len(self.study.trials)} trial(s)) in {storage}")
        if self.mine is not None:
            out.append(f"  its {len(self.mine.runs)} MLflow run(s) (the parent run and {len(self.mine.trials)} "
                       f"trial run(s)) in experiment {name!r} in {tracking}")
        n_none = sum(len(g.runs) for g in self.none)
        lost = lost_file(self.spec.storage) if self.study is None else None
        if n_none:
            whose = ("whose study is not in its file (below)" if lost is not None else
                     "that belong to no study (left by an earlier study of this name, deleted another way)")
            out.append(f"  {n_none} MLflow run(s) there {whose}")
        for folder in self.folders:
            n = sum(1 for p in folder.iterdir() if trialdir.number_of(p) is not None)
            out.append(f"  {n} trial folder(s) in {folder}")
        if self.mine is not None:
            out.append(f"The experiment {name!r} stays, for the spec's next run.")
        if (gone := lost_file(self.spec.tracking_uri)) is not None and gone.endswith(" is empty"):
            out.append(f"(MLflow's file {gone}: it holds no run to delete, and is left as it is.)")
        if lost is not None:
            out.append(f"(The study's file {lost}: if it was lost or moved, not deleted on purpose, restore it "
                       "instead of deleting these: they are its results.)")
        return out

    def run(self) -> list[str]:
        """Delete, in the order the module gives; the lines to print."""
        done = []
        for group in [*self.none, *([self.mine] if self.mine is not None else [])]:
            for run in group.runs:
                self.client.delete_run(run.info.run_id)
        n_runs = sum(len(g.runs) for g in self.none) + (len(self.mine.runs) if self.mine is not None else 0)
        if n_runs:
            done.append(f"Deleted {n_runs} MLflow run(s) (MLflow keeps them, hidden, until `mlflow gc` purges them)")
        for folder in self.folders:
            shutil.rmtree(folder)
            done.append(f"Deleted the trial folders in {folder}")
        if self.study is not None:
            delete_study(self.spec)
            done.append(f"Deleted study {self.spec.name!r} from {shown(absolute_uri(self.spec.storage))}")
        return done


def lost_file(storage: str) -> str | None:
    """How an SQLite store's file is lost (missing or empty, as a lost or moved file leaves it), else None."""
    from orchestrator.store.sqlitefile import is_empty
    from orchestrator.urls import sqlite_path

    path = sqlite_path(absolute_uri(storage))
    if path is None or not is_empty(path):
        return None
    return f"{path} is empty" if path.exists() else f"{path} does not exist"


def _folders(spec: SweepSpec, study: Any, uid: str) -> list[Path]:
    """Where a study's trial folders on this host are: under ``./mlruns``, and wherever its trials
    that ran here name them (orchestrators started from other folders of this host; another
    host's trials are on its own disk, and a trial recorded before hosts were is taken as here)."""
    from orchestrator.store.record import TrialRecord

    found = {trialdir.root(spec.name, uid): None}
    for t in (study.trials if study is not None else []):
        rec = TrialRecord.of(t)
        if rec.trial_dir and rec.ran_here:
            found.setdefault(Path(rec.trial_dir).parent, None)
    return list(found)


def refuse_if_running(spec: SweepSpec, study: object) -> None:
    """A study an orchestrator runs now is not deleted under it."""
    from orchestrator.store.study import check_not_locked
    from orchestrator.urls import sqlite_path

    if sqlite_path(spec.storage) is not None:
        check_not_locked(spec.storage, spec.name, "delete")  # one line naming the holder's pid
        return
    from orchestrator.store.optuna_sql import live_trials

    alive = live_trials(spec.storage, spec.name, spec.search.grace_period_s)  # a trial just asked for counts
    if alive:
        raise StudyError(f"study {spec.name!r} is being run now ({len(alive)} trial(s) started or with a "
                         f"heartbeat in the last {spec.search.grace_period_s:g} s); stop its orchestrators first; nothing deleted")


def delete_study(spec: SweepSpec) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        optuna.delete_study(study_name=spec.name, storage=absolute_uri(spec.storage))
    except KeyError:
        pass  # gone meanwhile: what was asked for
    except Exception as exc:  # noqa: BLE001 - a driver's error: one line
        raise StudyError(f"storage {shown(spec.storage)}: {first_line(exc, typed=False)}") from None


def no_study(spec: SweepSpec, uid: str | None) -> list[Any]:
    """``orchestrate check``'s lines on runs that belong to no study (``agreement.Difference`` of
    kind ``no_study``), each with the command that deletes them."""
    from orchestrator.invocation import command
    from orchestrator.spec.load import DEFAULT_STORAGE, DEFAULT_TRACKING_URI
    from orchestrator.store.agreement import Difference
    from orchestrator.store.leftovers import describe, leftover_groups
    from orchestrator.urls import command_flags

    try:
        found = leftover_groups(spec.tracking_uri, spec.name, spec.storage, uid)
    except Exception as exc:  # noqa: BLE001 - MLflow's error: one line, as check's others
        raise StudyError(f"tracking_uri {shown(absolute_uri(spec.tracking_uri))}: {first_line(exc, typed=False)}") from None
    if not found:
        return []
    fix = command("delete", spec.path, *command_flags(spec, None, (DEFAULT_STORAGE, DEFAULT_TRACKING_URI)),
                  "--leftovers")
    return [Difference("no_study", f"{describe(g, spec.storage)}; delete them: {fix}") for g in found]


if __name__ == "__main__":
    sys.exit(main(["delete", *sys.argv[1:]]))
