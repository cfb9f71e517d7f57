"""The orchestrating process stays light: no torch, no mlflow until a real run needs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ORCHESTRATE


def test_cli_import_leaves_torch_and_mlflow_out() -> None:
    code = ("import sys, orchestrator.cli, orchestrator.sweep.loop, orchestrator.launch, orchestrator.search.space, "
            "orchestrator.store.study, orchestrator.store.tracking; "
            "print(sorted(m for m in ('torch', 'mlflow', 'optuna', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_and_dry_run_do_not_import_torch() -> None:
    code = ("import sys; from orchestrator import cli; "
            "rc = cli.main(['sweeps/bert_memory.yaml', '--dry-run']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', 'MLFLOW' if 'mlflow' in sys.modules else 'NO-MLFLOW')")
    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().endswith("NO-TORCH NO-MLFLOW"), out.stdout
    helped = subprocess.run([ORCHESTRATE, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "Exit codes" in helped.stdout


def test_schema_does_not_import_torch_or_mlflow() -> None:
    """``orchestrate schema`` answers from the spec's model alone, for an editor or CI that has no
    torch installed."""
    code = ("import sys, io, contextlib; from orchestrator import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    rc = cli.main(['schema']) + cli.main(['schema', '--format', 'markdown'])\n"
            "print(rc, len(out.getvalue()) > 1000, sorted(m for m in ('torch', 'mlflow', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 True []", out.stdout + out.stderr


def _module_imports() -> dict[str, set[str]]:
    """Each ``orchestrator`` module and the ``orchestrator`` modules it imports, anywhere in its
    body (function-level imports too), read with ``ast``: ``from P import N`` counts as importing
    ``P.N`` where that is a module, else ``P``. A package's own ``__init__`` is not counted as
    imported by its submodules' own imports (Python loads it first, but that is no edge back)."""
    import ast

    from conftest import ROOT

    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "orchestrator").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from .m import y
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_module_imports_main_and_no_import_cycle_among_orchestrator_modules() -> None:
    """Dependencies point one way (STYLE.md); ``orchestrator.harness.__main__`` is the running
    entry under ``python -m``, and importing it by name loads it a second time."""
    graph = _module_imports()
    assert "orchestrator.launch" in graph and "orchestrator.harness.child" in graph
    importers = sorted(m for m, deps in graph.items() if "orchestrator.harness.__main__" in deps)
    assert importers == [], f"modules import orchestrator.harness.__main__: {importers}"
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


ENTRY = {"orchestrator", "orchestrator.cli"}
ROOT_PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"
"""The command line: it hands over to every wing, and nothing imports it."""


def _wing(module: str, packages: set[str]) -> str:
    """The wing of an ``orchestrator`` module: its package under ``orchestrator/``, else ``top``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and f"orchestrator.{parts[1]}" in packages else "top"


def _both_ways(graph: dict[str, set[str]], packages: set[str]) -> dict[tuple[str, str], list[str]]:
    """Pairs of wings that import each other, each with the imports that make it (``a -> b``)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, deps in graph.items():
        if module in ENTRY:
            continue
        for dep in deps:
            a, b = _wing(module, packages), _wing(dep, packages)
            if a != b:
                edges.setdefault((a, b), []).append(f"{module} -> {dep}")
    return {(a, b): sorted(edges[a, b] + edges[b, a]) for a, b in edges if a < b and (b, a) in edges}


def test_the_wing_check_finds_wings_that_import_each_other() -> None:
    packages = {"orchestrator.search", "orchestrator.store"}
    graph = {"orchestrator.search.proposer": {"orchestrator.store.record", "orchestrator.errors"},
             "orchestrator.store.records": {"orchestrator.search.keys"},
             "orchestrator.errors": set(), "orchestrator.cli": {"orchestrator.search.proposer"}}
    assert _both_ways(graph, packages) == {("search", "store"): ["orchestrator.search.proposer -> orchestrator.store.record",
                                                                 "orchestrator.store.records -> orchestrator.search.keys"]}
    del graph["orchestrator.store.records"]
    assert _both_ways(graph, packages) == {}  # the entry point's imports of a wing are no way back


def test_no_two_wings_import_each_other() -> None:
    """Dependencies point one way between the wings (the packages under ``orchestrator/``) and the
    top modules (``top``), function-level imports included; the entry point ``cli`` is left out."""
    graph = _module_imports()
    packages = {m for m in graph if m.count(".") == 1 and (ROOT_PACKAGE / m.split(".")[1]).is_dir()}
    assert {"orchestrator.search", "orchestrator.store", "orchestrator.spec"} <= packages
    both = _both_ways(graph, packages)
    assert both == {}, "wings that import each other: " + "; ".join(
        f"{a} <-> {b} ({', '.join(why)})" for (a, b), why in both.items())
