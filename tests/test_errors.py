"""``errors.first_line``: every side's one line for an exception (the trial's result detail, the
doctor's facts, the stores' one-line errors)."""

from __future__ import annotations

import pytest

from orchestrator.errors import first_line


class _Silent(Exception):
    def __str__(self) -> str:
        return "  \n \n"


@pytest.mark.parametrize(("exc", "typed", "expected"), [
    (ValueError("bad value"), "ValueError: bad value", "bad value"),
    (RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB"), "RuntimeError: CUDA out of memory.",
     "CUDA out of memory."),
    (OSError("\n\n  first words  \nsecond"), "OSError: first words  ", "first words  "),
    (KeyError(), "KeyError", "KeyError"),
    (_Silent(), "_Silent", "_Silent"),
])
def test_first_line_table(exc: BaseException, typed: str, expected: str) -> None:
    assert first_line(exc) == typed
    assert first_line(exc, typed=False) == expected
