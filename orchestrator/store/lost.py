"""A study is never silently replaced: where the spec's study file is missing or empty (lost,
truncated to nothing, moved) but an earlier study of the same name left its runs (MLflow trial
runs in the spec's experiment, trial folders under ``mlruns/.trials/``), the sweep refuses to
start a new one, in one line that says what it found. (A study deleted from its file another
way, ``optuna delete-study``, is a choice: its runs are leftovers that ``check`` flags and
``orchestrate delete SPEC --leftovers`` removes.) ``--new-study`` starts
one on purpose: the earlier runs stay in MLflow and the folders on disk, untouched, and the new
study gets its own parent run and folders (its ``uid`` differs). The earlier results are not
read back into the new study: the study is the source of truth, and MLflow's runs do not hold
everything a study's record does (``record.TrialRecord``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import StudyError
from orchestrator.redact import shown

MAX_COUNTED = 1000
"""MLflow trial runs counted at most (a bound on the search; more reads as "1,000 or more")."""


def found_runs(name: str, client: Any, experiment_id: str | None, trials_root: Path) -> list[str]:
    """What an earlier study named ``name`` left: its MLflow trial runs (through ``client``, in
    ``experiment_id``) and its trial folders (``trials_root``: ``mlruns/.trials``), each as a few
    words; [] when it left nothing."""
    found = []
    if experiment_id is not None:
        runs = client.search_runs([experiment_id], filter_string="tags.role = 'trial'", max_results=MAX_COUNTED)
        if runs:
            many = f"{len(runs):,}" + (" or more" if len(runs) >= MAX_COUNTED else "")
            found.append(f"MLflow experiment {name!r} holds {many} trial run(s)")
    folders = [f for f in sorted(trials_root.glob(f"{_escaped(name)}-*")) if f.is_dir() and _is_study_root(f, name)]
    n = sum(1 for f in folders for t in f.iterdir() if t.is_dir() and t.name.startswith("trial-"))
    if n:
        where = str(folders[0]) if len(folders) == 1 else f"{len(folders)} folders in {trials_root}"
        found.append(f"{where} holds {n} trial folder(s)")
    return found


def _escaped(name: str) -> str:
    import glob

    return glob.escape(name)


def _is_study_root(folder: Path, name: str) -> bool:
    """``<name>-<uid[:8]>`` (``trialdir.root``), not another study's whose name starts the same."""
    suffix = folder.name[len(name) + 1:]
    return len(suffix) == 8 and all(c in "0123456789abcdef" for c in suffix)


def refuse(name: str, storage: str, why: str, found: list[str]) -> StudyError:
    """The line that refuses to replace the study (``why``: how it is missing)."""
    return StudyError(
        f"study {name!r} is missing from {shown(storage)} ({why}), but an earlier study of this name left its runs: "
        f"{'; '.join(found)}. If its file was lost or moved, restore it (its results are there); to start a new "
        "study on purpose, run with --new-study (the earlier runs stay in MLflow and the folders on disk)")


def why_missing(storage: str, path: Path | None) -> str:
    """How the study's file is missing, in a few words."""
    if path is None or not path.exists():
        return "the file does not exist"
    return "the file is empty"
