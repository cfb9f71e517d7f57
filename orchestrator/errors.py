"""Exceptions the orchestrator raises on purpose. The CLI turns each into one stderr line.
``first_line`` is how any exception is shown in one line, on both sides of the process boundary."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from orchestrator import exits


class OrchestratorError(Exception):
    """Base class: a problem the user can fix. Exit code 2 unless a subclass says otherwise."""

    exit_code = exits.USAGE


class SpecError(OrchestratorError, ValueError):
    """The spec file (or a flag that overrides it) breaks a rule.

    The message reads ``FILE:LINE: FIELD.PATH: rule, got VALUE`` so an editor can jump to it.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field, self.rule = file, line, field, message
        where = file or "<spec>"
        if line is not None:
            where = f"{where}:{line}"
        text = f"{where}: {field}: {message}" if field else f"{where}: {message}"
        super().__init__(text)


class SpecErrors(SpecError):
    """Every rule a spec breaks, found in one read: one ``SpecError`` per line, in the file's order
    (``rules.Checker.raise_found``). Its attributes are the first error's."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        self.file, self.line, self.field, self.rule = first.file, first.line, first.field, first.rule
        OrchestratorError.__init__(self, "\n".join(str(e) for e in self.errors))


def each_error(exc: SpecError) -> list[SpecError]:
    """The single errors of ``exc`` (itself, unless it holds several)."""
    return list(exc.errors) if isinstance(exc, SpecErrors) else [exc]


def raise_all(errors: list[SpecError]) -> None:
    """Every error of ``errors`` at once, each once, flags' first, then in the file's order (one
    ``SpecError`` as itself); nothing if there are none."""
    unique = list({str(e): e for error in errors for e in each_error(error)}.values())
    if not unique:
        return
    ordered = sorted(unique, key=lambda e: (e.line is not None, e.line or 0, str(e)))  # found by threads: in no order
    raise ordered[0] if len(ordered) == 1 else SpecErrors(ordered)


class StudyError(OrchestratorError):
    """The study's storage cannot be used as asked (locked, corrupt, created by another spec)."""


class NothingFeasible(StudyError):
    """``best`` (and a sweep's ``--export``): the study has no feasible measured trial to write; exit
    3, as a sweep whose trials left no feasible result, not 2 (nothing in the spec or flags is wrong)."""

    exit_code = exits.FAILED


class FailureBudgetExceeded(OrchestratorError):
    """More trials failed (other than by running out of memory) than ``search.max_failures``."""

    exit_code = exits.FAILED


class UsageParser(argparse.ArgumentParser):
    """argparse with usage errors in one line and exit 2, like every other error of this tool."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(exits.USAGE)


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters written as escapes (``\\n``): a
    message quoting a value such as ``"my\\nsweep"`` stays one line, and a terminal gets no escape
    sequences from a spec."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def first_line(exc: BaseException, typed: bool = True) -> str:
    """An exception in one line: its type and its message's first non-blank line
    (``"ValueError: bad value"``), or its type alone when it has no message. ``typed=False``: the
    line alone, for a message that names what failed itself. Standard library only: the harness
    writes it into a trial's result, the orchestrator into its own one-line errors."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return f"{type(exc).__name__}: {lines[0]}" if typed else lines[0]


def print_error(exc: OrchestratorError) -> int:
    """How every command reports an error it expected: one line on stderr (a spec error already
    names its file and line; a spec that breaks several rules gets one line for each); returns the
    exit code."""
    if isinstance(exc, SpecErrors):
        for error in exc.errors:  # one line each, as an editor or a compiler's output reads them
            print(one_line(str(error)), file=sys.stderr)
        return exc.exit_code
    print(one_line(f"orchestrate: {exc}" if not isinstance(exc, SpecError) else str(exc)), file=sys.stderr)
    return exc.exit_code


def standard_streams() -> None:
    """File descriptors 0, 1 and 2 open, on ``/dev/null`` where the command was started without
    them (``orchestrate SPEC >&-``, a daemon's environment): Python then sets ``sys.stdout`` (or
    ``stdin``, ``stderr``) to None, every print raised, and the next file the command opened (a
    store's database) took the free number, which its trials' output would have written into."""
    for fd, mode, name in ((0, os.O_RDONLY, "stdin"), (1, os.O_WRONLY, "stdout"), (2, os.O_WRONLY, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))


def silence_stdout() -> None:
    """The reader of our output left early (``| head``): send the rest, and the flush at exit,
    nowhere instead of raising BrokenPipeError again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
