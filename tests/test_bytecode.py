"""``orchestrator.bytecode``: a package without bytecode that Python will not write is named once,
with the command that compiles it; one with bytecode, or one Python may still compile, is not.
Real packages on disk and real ``python`` processes with the variables a Docker image sets."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import py_compile
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import bytecode

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package ``heavy`` on ``sys.path``, without bytecode."""
    folder = tmp_path / "site" / "heavy"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(folder.parent))
    return folder


def test_no_bytecode_and_not_allowed_to_write_it_is_named_with_the_fix(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    line = bytecode.uncompiled("heavy")
    assert line is not None
    assert f"heavy at {pkg} has no compiled bytecode" in line and "PYTHONDONTWRITEBYTECODE is set" in line
    assert line.endswith(f"-m compileall -qq {pkg.parent}") and sys.executable in line


def test_the_fix_it_prints_makes_the_line_go_away(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    fix = bytecode.uncompiled("heavy").split("Compile it once: ", 1)[1]  # type: ignore[union-attr]
    subprocess.run(fix, shell=True, check=True)
    assert bytecode.uncompiled("heavy") is None


def test_writable_folder_and_writing_allowed_is_left_to_the_first_import(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert bytecode.uncompiled("heavy") is None


def test_read_only_folder_is_named(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only by its mode, or (root writes to any mode, and CI runs as root) by a read-only bind
    mount over it, as an image's read-only layer is: skipped where neither can be made."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    with read_only(pkg):
        assert "its folder is read-only" in (bytecode.uncompiled("heavy") or "")


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    try:
        bound = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("root, and no mount command to make a read-only folder")
    if bound.returncode != 0:
        pytest.skip(f"root, and no read-only bind mount here ({bound.stderr.strip()})")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, timeout=30)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True, timeout=30)


def test_compiled_package_and_missing_or_builtin_ones_say_nothing(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    py_compile.compile(str(pkg / "__init__.py"), cfile=importlib.util.cache_from_source(str(pkg / "__init__.py")))
    assert bytecode.uncompiled("heavy") is None
    assert bytecode.uncompiled("no_such_package_here") is None
    assert bytecode.uncompiled("sys") is None  # built in: no source to compile


def test_a_real_python_with_an_images_variables_sees_torch_uncompiled(tmp_path: Path) -> None:
    """The variables as a Dockerfile sets them, in a fresh interpreter: the cache folder that
    ``PYTHONPYCACHEPREFIX`` names is empty, so torch has no bytecode there; without the
    variables this checkout's torch has its bytecode (pip compiled it)."""
    code = "from orchestrator.bytecode import uncompiled; print(uncompiled())"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPYCACHEPREFIX": str(tmp_path / "empty")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("torch at ") and "PYTHONDONTWRITEBYTECODE is set" in out and "-m compileall -qq" in out
    plain = {k: v for k, v in env.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    assert subprocess.run([sys.executable, "-c", code], env=plain, capture_output=True, text=True,
                          check=True).stdout.strip() == "None"
