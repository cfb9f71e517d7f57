"""A training script's file, read without measuring it: what it imports at
its top level (the fork server imports those ahead: ``preload_imports``), and a failed run's one
line (where in the script, and the last lines it printed). No torch."""

from __future__ import annotations

import os
import sys
from typing import Any


def top_level_imports(path: str) -> list[str]:
    """The modules a script imports at its top level (``import x.y``, ``from x.y import z``;
    inside a top-level ``try`` or ``if`` too), in order; relative imports left out. Read with
    ``ast``: nothing of the script runs."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module)
            elif isinstance(node, ast.Try):
                visit(node.body)
            elif isinstance(node, ast.If):
                visit(node.body)
    visit(tree.body)
    return list(dict.fromkeys(names))

def preload_imports(path: str) -> list[str]:
    """Import, in the fork server, the installed modules a script imports at its top level (its
    own folder's modules are left to the trial: importing them could run its code), so that each
    trial finds them loaded. Device-neutral: torch's CUDA check is asked through NVML meanwhile
    (``PYTORCH_NVML_BASED_CUDA_CHECK``), so that no import initialises CUDA before the fork.
    Returns the modules imported; a module that fails to import is left for the trial to report."""
    import importlib
    import importlib.machinery
    import importlib.util

    folder = os.path.dirname(os.path.abspath(path))
    done = []
    before = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        for name in top_level_imports(path):
            try:
                top = name.split(".")[0]
                if importlib.machinery.PathFinder.find_spec(top, [folder]) is not None:
                    continue  # the script's own (a git.py beside it): the installed one would shadow it
                spec = importlib.util.find_spec(top)
                origin = getattr(spec, "origin", None) or ""
                if spec is None or os.path.abspath(origin).startswith(folder + os.sep):
                    continue
                importlib.import_module(name)
                done.append(name)
            except BaseException:  # noqa: BLE001 - the trial imports it again and reports it
                continue
    finally:
        if before is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = before
    return done

def last_lines(log_path: str | os.PathLike[str] | None, n: int = 3, limit: int = 300) -> str | None:
    """The last ``n`` lines the process printed, joined with `` | ``: from its log, or (None)
    from its standard error where that is a file it may read (a probe of its own's); None if none."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if log_path is not None:
            with open(log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                tail = f.read()
        else:
            size = os.fstat(2).st_size
            tail = os.pread(2, 16384, max(0, size - 16384))
    except OSError:
        return None
    lines = [ln.strip() for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
    text = " | ".join(lines[-n:])
    return (text if len(text) <= limit else "..." + text[-limit:]) or None

def where_in(tb: Any, script_path: str) -> str | None:
    """The innermost line of the traceback in the script's own folder (FILE:LINE), if any."""
    import traceback

    folder = os.path.dirname(os.path.abspath(script_path)) + os.sep
    for frame in reversed(traceback.extract_tb(tb)):
        if frame.filename.startswith("<"):  # <frozen os>, <string>: no file (made absolute, one "in" the folder)
            continue
        filename = os.path.abspath(frame.filename)
        if filename.startswith(folder) and "site-packages" not in filename:
            return f"{os.path.relpath(filename) if filename.startswith(os.getcwd()) else filename}:{frame.lineno}"
    return None

def describe_failure(exc: BaseException, script_path: str, log_path: str | None, what: str) -> str:
    """One line for a script that failed: ``what`` (its exception, first line), where in the
    script, and the last lines it printed."""
    at = None if getattr(exc, "ended", False) else where_in(exc.__traceback__, script_path)
    tail = last_lines(log_path)
    return what + (f" at {at}" if at else "") + (f"; it printed: {tail}" if tail else "")
