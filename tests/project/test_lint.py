"""Pyflakes' rules (ruff ``F``) over the whole tree: undefined names, unused imports and variables,
f-strings without placeholders. An undefined name in a rarely taken branch (an error path, a
device we have no machine for) is a crash that no other test would reach."""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT


def test_pyflakes_rules_hold_everywhere() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F", "--no-cache", "--output-format",
                           "concise", "orchestrator", "experiments", "examples", "bench", "tests"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


MAX_MODULE_LINES = 400  # issue #22: a room a newcomer reads in one sitting; split a module that grows past it


def test_no_orchestrator_module_is_over_400_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / "orchestrator").rglob("*.py")}
    assert len(sizes) > 30  # the package was found
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


RECORD_DOORS = {"orchestrator/store/record.py", "orchestrator/store/studyrecord.py", "orchestrator/store/studyread.py"}
"""Issue #26: a trial's record (status, metrics, repeat links, ...) has one door. Only these read
or write Optuna's user attributes by name: ``record`` a trial's, ``studyrecord`` a study's, and
``studyread``'s ``StoredTrial``/``StoredStudy``, which hold them as Optuna's ``FrozenTrial`` does."""


def test_at_most_three_orchestrator_modules_mention_user_attrs() -> None:
    mention = {str(p.relative_to(ROOT)) for p in (ROOT / "orchestrator").rglob("*.py") if "user_attrs" in p.read_text()}
    assert len(mention) <= 3 and mention <= RECORD_DOORS, sorted(mention - RECORD_DOORS)


MAX_PARAMETERS = 8
"""Issue #42: a function of the sweep wing that takes more is a bag of loose state: group it."""


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Every parameter of ``fn`` (positional, keyword-only, ``*args``, ``**kwargs``) but self and cls."""
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return [n for n in names if n not in ("self", "cls")]


def test_the_parameter_count_counts_every_kind_but_self() -> None:
    fn = ast.parse("def f(self, a, /, b, *c, d, **e): pass").body[0]
    assert isinstance(fn, ast.FunctionDef) and _parameters(fn) == ["a", "b", "d", "c", "e"]


def test_no_function_in_the_sweep_wing_takes_more_than_8_parameters() -> None:
    found = {}
    for path in sorted((ROOT / "orchestrator" / "sweep").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_parameters(node)) > MAX_PARAMETERS:
                found[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = len(_parameters(node))
    assert found == {}
