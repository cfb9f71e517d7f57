"""How the user ran this command, so that every command line it prints pastes as printed.

A user who followed the README without activating the venv types ``.venv/bin/orchestrate SPEC``;
``orchestrate report SPEC`` pasted from its output would end in ``command not found`` (exit 127).
Every printed command therefore starts with the executable as it was invoked: ``orchestrate``
where that name on ``PATH`` is this very script (an activated venv, a ``pipx`` or system
install), else its path as typed (``.venv/bin/orchestrate``, relative like the spec's path beside
it, or absolute). The tools next to it (``mlflow``, ``pip``, ``optuna-dashboard``) are named the
same way: from the same folder when ``orchestrate`` was run by its path. ``python -m
orchestrator.cli`` prints ``<this python> -m orchestrator.cli``. Standard library only.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

NAME = "orchestrate"
MODULE = "orchestrator.cli"


def _same_file(a: str, b: str) -> bool:
    """The same path, symlinks not followed: a venv's ``python`` links to the system's, and the
    system's ``python`` on ``PATH`` does not see the venv's packages."""
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _as_typed(path: str, name: str) -> str:
    """``name`` when ``name`` on ``PATH`` is ``path``, else ``path`` as given."""
    found = shutil.which(name)
    return name if found is not None and _same_file(found, path) else path


def program(argv0: str | None = None) -> list[str]:
    """The words a printed ``orchestrate`` command starts with (``["orchestrate"]``,
    ``[".venv/bin/orchestrate"]``, ``["/usr/bin/python3", "-m", "orchestrator.cli"]``)."""
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    base = os.path.basename(argv0)
    if base == NAME and os.sep in argv0:
        return [_as_typed(argv0, NAME)]
    if base in ("cli.py", "__main__.py") and os.path.basename(os.path.dirname(argv0)) == "orchestrator":
        python = sys.executable or "python3"
        return [_as_typed(python, os.path.basename(python)), "-m", MODULE]
    return [NAME]  # typed as a bare name, or this code runs inside another program (a test)


def tool(name: str, argv0: str | None = None) -> str:
    """Another console script of this environment (``mlflow``, ``pip``) as a printed command
    names it: beside ``orchestrate`` where that was run by its path, else by its name."""
    first = program(argv0)[0]
    folder = os.path.dirname(first) if first != NAME else ""
    return os.path.join(folder, name) if folder else name


def command(*args: object) -> str:
    """An ``orchestrate`` command line a user can paste: the executable as invoked, then every
    part shell-quoted."""
    return shlex.join([*program(), *map(str, args)])


def command_in(folder: str, *args: object) -> str:
    """``command`` run in another folder (``cd FOLDER && orchestrate ...``), the program typed by a
    relative path made absolute, so that it still names it there."""
    first, *rest = program()
    if os.sep in first and not os.path.isabs(first):
        first = os.path.abspath(first)
    return f"cd {shlex.quote(folder)} && " + shlex.join([first, *rest, *map(str, args)])
