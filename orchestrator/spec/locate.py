"""Where the spec's ``experiment:`` module is, found as a trial will find it, without running it.

A trial (and the probe) is ``python -m ...`` started in the working directory, so its
``sys.path`` starts with that directory, then ``PYTHONPATH``, the standard library and
site-packages (an editable install's finder included). The ``orchestrate`` console script's own
``sys.path`` starts with the script's folder instead: ``--dry-run`` asks ``locate`` with the
trial's path, so that it finds every module the real run finds. Nothing is imported: each part
of the dotted name is looked up by the import system's finders, package by package, so no
package's ``__init__`` runs (it could import torch).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    name: str
    origin: str
    """The module's file, or the folder of a namespace package."""


def trial_path(cwd: Path | None = None) -> list[str]:
    """``sys.path`` as a trial started in ``cwd`` has it: the working directory first, then this
    interpreter's own entries, without the console script's folder that only ``orchestrate`` has."""
    here = str((cwd or Path.cwd()).resolve())
    script_dir = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    rest = [p for p in sys.path[1:] if p and p != here]
    if sys.path and sys.path[0] not in ("", script_dir, here):
        rest.insert(0, sys.path[0])  # not the script's folder: an entry the trial has too
    return [here, *rest]


def locate(name: str, path: list[str]) -> Found:
    """The module ``name`` on ``path``; ``LookupError`` whose message says where it looked."""
    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        raise LookupError(f"{name!r} is not a module name (dotted Python identifiers, e.g. experiments.bert)")
    spec = _find_top(parts[0], path)
    if spec is None:
        raise LookupError(missing_message(name, path))
    search = path
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if spec.submodule_search_locations is None:
            did = f" (did you mean {parent}?)" if name == f"{parent}.py" else ""  # the file's name (a tour)
            raise LookupError(f"no module named {name!r}: {parent} ({spec.origin}) is a module, not a package{did}")
        locations = _locations(spec, parts[i - 1], search)
        # the last part alone: files are looked up by it, and a namespace package found under a
        # dotted name would look for its parent in sys.modules (nothing is imported here)
        spec = importlib.machinery.PathFinder.find_spec(parts[i], locations)
        search = locations
        if spec is None:
            folders = ", ".join(str(p) for p in locations)
            raise LookupError(f"no module named {name!r}: package {parent} ({folders}) has no "
                              f"{parts[i]}.py and no {parts[i]}/ folder")
    origin = spec.origin if spec.origin not in (None, "namespace") else \
        next(iter(spec.submodule_search_locations or []), "?")
    return Found(name, str(origin))


def _locations(spec: importlib.machinery.ModuleSpec, part: str, search: list[str]) -> list[str]:
    """A package's folders. A namespace package's are its folder in each entry of the path it was
    found on (its own list would recompute them from this process's ``sys.path``)."""
    if spec.origin is None or spec.origin == "namespace" or spec.loader is None \
            or type(spec.loader).__name__ == "NamespaceLoader":
        return [os.path.join(p, part) for p in search if os.path.isdir(os.path.join(p, part))]
    return list(spec.submodule_search_locations or [])


def _find_top(part: str, path: list[str]) -> importlib.machinery.ModuleSpec | None:
    """The top-level package or module, asking the finders in the order ``import`` does, with
    ``path`` in place of ``sys.path``."""
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder or isinstance(finder, importlib.machinery.PathFinder):
            spec = importlib.machinery.PathFinder.find_spec(part, path)
        else:
            find = getattr(finder, "find_spec", None)
            try:
                spec = find(part, None) if find is not None else None
            except (ImportError, ValueError, TypeError):
                spec = None
        if spec is not None:
            return spec
    return None


def missing_message(name: str, path: list[str]) -> str:
    """Where a module that no finder has was looked for, in one line."""
    top = name.split(".")[0]
    rel = name.replace(".", "/")
    here = path[0] if path else os.getcwd()
    env = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    packages = [p for p in path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    where = [f"the working directory {here} (no {rel}.py or {rel}/ there)"]
    if env:
        where.append(f"PYTHONPATH ({', '.join(env)})")
    where.append("the installed packages" + (f" ({', '.join(packages)})" if packages else ""))
    return (f"no module named {name!r}: looked in " + ", ".join(where[:-1]) + f" and {where[-1]}; "
            f"run orchestrate from the folder that holds {top}/ (or {top}.py), or install the package "
            "that provides it")
