"""Pyflakes' rules (ruff ``F``) over the whole tree: undefined names, unused imports and variables,
f-strings without placeholders. An undefined name in a rarely taken branch (an error path, a
device we have no machine for) is a crash that no other test would reach."""

from __future__ import annotations

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
