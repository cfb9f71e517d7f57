"""``--dry-run`` finds the experiment module where the real run's trial finds it (the working
directory first on the path, as ``python -m`` has it), without running any of it; a module that
is truly missing is one line that says where it was looked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ORCHESTRATE, orchestrate, write_spec
from orchestrator.spec.locate import locate, trial_path

LAYOUTS = {  # name -> the files of a project folder, each a layout a user may have
    "tinyconv": {"tinyconv.py": "def build(params, device): ...\n"},
    "mine.tinyconv": {"mine/__init__.py": "", "mine/tinyconv.py": "def build(params, device): ...\n"},
    "ns.deep.tinyconv": {"ns/deep/tinyconv.py": "def build(params, device): ...\n"},  # namespace packages
    "mine.nosuch": {"mine/__init__.py": "", "mine/tinyconv.py": ""},
    "nosuchpkg.tinyconv": {},
    "tinyconv.inner": {"tinyconv.py": ""},  # a module is not a package
    "experiments.bert": {},  # installed (editable): found from any folder
    "experiments.nosuch": {},
}


def make_project(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def trial_finds(name: str, cwd: Path) -> bool:
    """Whether a trial's interpreter, started in ``cwd`` (``python -m``/``-c``: the working
    directory first on its path), finds ``name``."""
    code = (f"import importlib.util\ntry:\n    print(importlib.util.find_spec({name!r}) is not None)\n"
            "except ImportError:\n    print(False)")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


@pytest.mark.parametrize("name", LAYOUTS)
def test_locate_agrees_with_the_trial_s_interpreter(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path, LAYOUTS[name])
    monkeypatch.chdir(project)
    try:
        found = locate(name, trial_path())
    except LookupError:
        found = None
    assert (found is not None) == trial_finds(name, project)
    if found is not None and name != "experiments.bert":
        assert Path(found.origin).resolve().is_relative_to(project.resolve()), found


@pytest.mark.parametrize("name, message", [
    ("mine.nosuch", "no module named 'mine.nosuch': package mine ({project}/mine) has no nosuch.py and no nosuch/ folder"),
    ("tinyconv.inner", "no module named 'tinyconv.inner': tinyconv ({project}/tinyconv.py) is a module, not a package"),
    ("nosuchpkg.tinyconv", "no module named 'nosuchpkg.tinyconv': looked in the working directory {project} (no "
                           "nosuchpkg/tinyconv.py or nosuchpkg/tinyconv/ there) and the installed packages ("),
    ("experiments.nosuch", "no module named 'experiments.nosuch': package experiments ("),
    ("bad..name", "'bad..name' is not a module name (dotted Python identifiers, e.g. experiments.bert)"),
])
def test_a_missing_module_says_where_it_was_looked_for(name: str, message: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path, LAYOUTS.get(name, {}))
    monkeypatch.chdir(project)
    with pytest.raises(LookupError) as info:
        locate(name, trial_path())
    assert str(info.value).startswith(message.format(project=project.resolve())), str(info.value)
    if name == "nosuchpkg.tinyconv":
        assert "site-packages" in str(info.value) and str(info.value).endswith(
            "run orchestrate from the folder that holds nosuchpkg/ (or nosuchpkg.py), or install the package "
            "that provides it")


def test_the_console_script_s_dry_run_finds_the_module_the_real_run_finds(tmp_path: Path) -> None:
    """The issue's case: mine/tinyconv.py beside mine/tinyconv.yaml, run from the project folder
    with the installed ``orchestrate`` (whose own path starts with its bin/ folder)."""
    project = make_project(tmp_path, {"mine/__init__.py": "open('INIT_RAN', 'w')\n",  # must not run
                                      "mine/tinyconv.py": "def build(params, device): ...\n"})
    spec = write_spec(project / "mine", """
        name: tinyconv
        experiment: mine.tinyconv
        device: cpu
        space:
          batch_size: [8, 16]
        """, name="tinyconv.yaml")
    proc = subprocess.run([ORCHESTRATE, "mine/tinyconv.yaml", "--dry-run"], cwd=project, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"  experiment   mine.tinyconv ({project.resolve()}/mine/tinyconv.py)" in proc.stdout
    assert not (project / "INIT_RAN").exists() and not (project / "mlruns").exists()  # nothing ran, nothing made
    assert spec.is_file()


def test_a_truly_missing_module_is_one_line_at_the_experiment_s_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: t
        experiment: mine.nosuch
        device: cpu
        space:
          batch_size: [8]
        """)
    proc = orchestrate([str(spec), "--dry-run"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"{spec}:2: experiment: no module named 'mine.nosuch': looked in the working directory "
                           f"{tmp_path.resolve()} (no mine/nosuch.py or mine/nosuch/ there) and the installed packages ("
                           + proc.stderr.split("installed packages (", 1)[1])
    assert proc.stderr.count("\n") == 1 and "run orchestrate from the folder that holds mine/" in proc.stderr
