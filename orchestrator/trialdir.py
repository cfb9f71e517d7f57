"""The trial folder's layout: where a study's trials keep their files, and the name of each file.
Written by the launcher and the harness, read by the sweep, the stores' repair and the report;
spelled out here only. Standard library only (the harness imports it too).

    mlruns/.trials/<study>-<uid[:8]>/     root(name, uid)
        .interpreters/<ns>.log            a pre-started process's log, until it has a trial
        .inductor/                        Inductor's caches, for compile: true (harness/compiled.py)
        trial-0007/                       folder(root, 7)
            config.json                   the trial's configuration (protocol.TrialConfig)
            trial.log                     its process's stdout and stderr
            result.json                   its result (protocol.TrialResult), written atomically
            repeat-2/ ...                 repeat k > 1 of it (trial.repeats), the same three files
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = "config.json"
"""The configuration the trial process is given (the path is sent in its ``run`` order)."""
LOG = "trial.log"
"""The trial process's stdout and stderr."""
RESULT = "result.json"
"""The trial's result, written by the trial process (``child.write_result``)."""
PARTIAL = ".tmp"
"""Appended to the result's name while it is being written (then renamed onto it)."""
FILES = (LOG, RESULT, CONFIG)
"""A trial's files, in the order they are logged to its MLflow run."""
SPARES = ".interpreters"
"""Where, in the study's trial folder, a pre-started process keeps its log until it has a trial."""
COMPILE_CACHE = ".inductor"
"""Where, in the study's trial folder, ``compile: true`` trials keep Inductor's caches
(``harness/compiled.py``): shared by the study's trials, repeats and resumed runs."""
PREFIX = "trial-"


def root(name: str, uid: str) -> Path:
    """The folder of a study's trial folders, under the working directory's ``mlruns/``."""
    return (Path("mlruns") / ".trials" / f"{name}-{uid[:8]}").resolve()


def folder(trials: Path, number: int) -> Path:
    """Trial ``number``'s folder in ``trials`` (a study's ``root``)."""
    return trials / f"{PREFIX}{number:04d}"


def number_of(path: Path) -> int | None:
    """The trial number of a trial folder; None for any other path."""
    digits = path.name[len(PREFIX):]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def repeat_dir_name(k: int) -> str | None:
    """Where repeat ``k`` (1-based) writes its files, relative to the trial folder: the first in
    the trial folder itself (as without repeats), the others in ``repeat-<k>/``."""
    return None if k == 1 else f"repeat-{k}"


def repeat_path(trial_dir: Path, k: int) -> Path:
    """The folder repeat ``k`` (1-based) runs in."""
    sub = repeat_dir_name(k)
    return trial_dir / sub if sub else trial_dir


def files(trial_dir: Path, processes: int = 1) -> list[tuple[Path, str | None]]:
    """A trial's files and the MLflow artifact folder of each (repeat k > 1 in ``repeat-<k>/``)."""
    out: list[tuple[Path, str | None]] = []
    for k in range(1, processes + 1):
        out += [(repeat_path(trial_dir, k) / name, repeat_dir_name(k)) for name in FILES]
    return out


def partial(result_path: str | Path) -> str:
    """Where a result is written before it is renamed onto ``result_path``."""
    return f"{result_path}{PARTIAL}"


def multiprocessing_folder() -> str:
    """A new folder for a trial's (or the smoke step's) multiprocessing files, outside the project
    (``TrialConfig.temp_dir``; its launcher removes it, else the next orchestrator: ``tempfolder``):
    named and placed about as multiprocessing names its own (``pymp-*`` in the temp folder, the
    orchestrator's pid added), for a socket's path has room for 104-108 bytes only."""
    from orchestrator import tempfolder

    return str(tempfolder.own(tempfolder.MULTIPROCESSING))


def write_atomically(path: str | Path, text: str) -> None:
    """``text`` to ``path``, under another name first, then renamed (a reader never sees half)."""
    tmp = partial(path)
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:  # a full disk: no half-written file left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
