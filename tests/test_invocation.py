"""The executable a printed command starts with: as the user ran it (orchestrator/invocation.py).
The real paste, in a shell from a clean folder, is tests/scenarios/test_paste.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from orchestrator.invocation import command, program, tool


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with an executable `orchestrate`, `mlflow` and `python` in `.venv/bin`, not on PATH."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("orchestrate", "mlflow", "python"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    return bin_dir


def test_by_its_path_the_path_as_typed(venv: Path) -> None:
    assert program(".venv/bin/orchestrate") == [".venv/bin/orchestrate"]
    assert program(str(venv / "orchestrate")) == [str(venv / "orchestrate")]
    assert tool("mlflow", ".venv/bin/orchestrate") == ".venv/bin/mlflow"
    assert tool("optuna-dashboard", ".venv/bin/orchestrate") == ".venv/bin/optuna-dashboard"  # once installed there


def test_on_path_its_name(venv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An activated venv: the shell found `orchestrate` on PATH and ran it by its full path."""
    monkeypatch.setenv("PATH", f"{venv}{os.pathsep}/usr/bin")
    assert program(str(venv / "orchestrate")) == ["orchestrate"]
    assert tool("mlflow", str(venv / "orchestrate")) == "mlflow"


def test_another_orchestrate_on_path_is_not_this_one(venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "orchestrate").write_text("#!/bin/sh\n")
    (other / "orchestrate").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}/usr/bin")
    assert program(".venv/bin/orchestrate") == [".venv/bin/orchestrate"]


def test_python_dash_m(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    words = program(str(Path("orchestrator/cli.py").resolve()))
    assert words == [sys.executable, "-m", "orchestrator.cli"]
    assert tool("mlflow", str(Path("orchestrator/cli.py").resolve())) == str(Path(sys.executable).with_name("mlflow"))


def test_inside_another_program_the_bare_name() -> None:
    assert program("/usr/lib/python3/site-packages/pytest/__main__.py") == ["orchestrate"]
    assert program("orchestrate") == ["orchestrate"]


def test_command_quotes_every_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["my dir/.venv/bin/orchestrate"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert command("report", "a spec.yaml") == "'my dir/.venv/bin/orchestrate' report 'a spec.yaml'"
