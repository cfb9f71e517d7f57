"""The types are checked (issue #42 item 2): mypy passes over ``orchestrator/`` and
``experiments/`` (configured in pyproject's ``[tool.mypy]``), at most ``MAX_EXACT_ANY``
annotations say exactly ``Any``, and every ``# type: ignore`` names its error codes and why.

``python tests/project/test_types.py`` lists the exactly-``Any`` annotations, per module."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "experiments")

MAX_EXACT_ANY = 100
"""Parameters (``*args`` and ``**kwargs`` included), returns and annotated variables whose
annotation is ``Any`` itself (not ``dict[str, Any]``): 326 before issue #42."""

MYPY_CACHE = Path(sys.prefix) / "mypy_cache"
"""mypy's incremental cache, in the venv (outside the tree; a fresh venv starts it cold): the first
run checks every module (about 30 CPU-s on the 2-core machine), later ones what changed
(seconds)."""


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _is_any(node: ast.expr) -> bool:
    return ((isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")
            or (isinstance(node, ast.Constant) and node.value == "Any"))


def exact_any(path: Path) -> list[str]:
    """``path:line name`` for each annotation in ``path`` that is exactly ``Any``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]:
                if arg.annotation is not None and _is_any(arg.annotation):
                    found.append(f"{arg.lineno} {node.name}({arg.arg})")
            if node.returns is not None and _is_any(node.returns):
                found.append(f"{node.lineno} {node.name} -> Any")
        elif isinstance(node, ast.AnnAssign) and _is_any(node.annotation):
            found.append(f"{node.lineno} {ast.unparse(node.target)}")
    return [f"{_shown(path)}:{hit}" for hit in found]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def test_the_any_counter_counts_what_it_says(tmp_path: Path) -> None:
    tree = ("from typing import Any\nimport typing\n"
            "def f(a: Any, b: dict[str, Any], *args: Any, c: 'Any', **kw: typing.Any) -> Any:\n"
            "    x: Any = 1\n    y: list[Any] = []\n")
    path = tmp_path / "probe.py"
    path.write_text(tree)
    names = [hit.split(" ", 1)[1] for hit in exact_any(path)]
    assert sorted(names) == sorted(["f(a)", "f(args)", "f(c)", "f(kw)", "f -> Any", "x"])


def test_at_most_100_annotations_are_exactly_any() -> None:
    hits = [hit for p in sources() for hit in exact_any(p)]
    assert len(sources()) > 100  # both packages were found
    per_module = Counter(hit.split(":")[0] for hit in hits)
    assert len(hits) <= MAX_EXACT_ANY, (f"{len(hits)} annotations are exactly Any (at most {MAX_EXACT_ANY}); "
                                        f"most in {per_module.most_common(5)}")


IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<after>.*)")


def ignores_without_reason(path: Path) -> list[str]:
    """Each ``# type: ignore`` comment in ``path`` that names no error code, or gives no reason
    after it (``# type: ignore[code]  # why``) on the same line."""
    bad = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        m = IGNORE.search(tok.string) if tok.type == tokenize.COMMENT else None
        if m is None:
            continue
        reason = m["after"].strip().lstrip("#").strip()
        if not m["codes"] or m["codes"] == "[]" or len(reason) < 8:
            bad.append(f"{_shown(path)}:{tok.start[0]}: {tok.string}")
    return bad


def test_every_type_ignore_names_its_codes_and_its_reason() -> None:
    bad = [line for p in sources() for line in ignores_without_reason(p)]
    assert bad == [], "write '# type: ignore[code]  # the reason':\n" + "\n".join(bad)


def test_the_ignore_rule_catches_a_bare_ignore_and_one_without_reason(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("a = 1  # type: ignore\nb = 2  # type: ignore[misc]\n"
                    "c = 3  # type: ignore[misc]  # the stubs say str, it is bytes\n")
    found = ignores_without_reason(path)
    assert [line.split(":")[1] for line in found] == ["1", "2"]


@pytest.mark.timeout(900)
def test_mypy_finds_no_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(MYPY_CACHE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=880)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


if __name__ == "__main__":
    hits = [hit for p in sources() for hit in exact_any(p)]
    for module, n in Counter(hit.split(":")[0] for hit in hits).most_common():
        print(f"{n:4d}  {module}")
    print(f"{len(hits)} annotations are exactly Any (at most {MAX_EXACT_ANY})")
