"""A training script's source, compiled without running it: why it cannot run (a missing file, a
syntax error at its line). Both sides read it: the sweep before anything starts (``spec.script``,
``--dry-run`` too), and the trial's probe (``harness.probe``). Its digest tells a study's runs
apart when the code changed between them (``digest``)."""

from __future__ import annotations


def check_source(path: str) -> str | None:
    """Why the script cannot run, read without running it (a missing file, a syntax error at its
    line); None where it compiles."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        return f"cannot read the script {path}: {exc.strerror or exc}"
    try:
        compile(source, path, "exec", dont_inherit=True)
    except ValueError as exc:  # a NUL byte: not a text file
        return f"{path} cannot be compiled: {exc}"
    except SyntaxError as exc:
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else path
        return f"{where}: {type(exc).__name__}: {exc.msg}"
    return None


def digest(path: str) -> str | None:
    """The script file's SHA-256 (hex); None where it cannot be read."""
    import hashlib

    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
