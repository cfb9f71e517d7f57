"""One door to Optuna (issue #26): only ``store/optuna_internals.py`` uses Optuna's private names,
and only ``store/optuna_sql.py`` holds SQL against Optuna's tables, so that an Optuna upgrade
breaks in one place (each module's own tests say where).

Read with ``ast``, comments and docstrings aside. A private name is one with a single leading
underscore that Optuna itself defines, read from the installed Optuna's source: a module or
package (``optuna.storages._heartbeat``), a class or function (``_CachedStorage``), a method or an
attribute set on ``self`` (``_get_stale_trial_ids``, ``_storage``, ``_trial_id``). It is flagged
as an import from Optuna, as an attribute of anything but ``self``/``cls`` (``study._storage``),
and as ``getattr``'s string (``getattr(storage, "_backend")``). Attribute names that the
orchestrator's own classes define too (``_lock``, ``_thread``) are left to them. SQL is a string
with an upper-case SQL word (``SELECT``, ``FROM``, ``JOIN``, ...) that names one of Optuna's
tables, as the installed Optuna's models list them (f-strings count by their literal parts), or a
string that is the name of one of Optuna's tables with an underscore in it
(``"trial_user_attributes"``; a bare ``"trials"`` is also an ordinary word)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

DOOR = "orchestrator/store/optuna_internals.py"
SQL_MODULE = "orchestrator/store/optuna_sql.py"
SQL_WORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|JOIN)\b")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names(root: Path, modules_and_functions: bool) -> set[str]:
    """The single-underscore names the code under ``root`` defines (see the module)."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if modules_and_functions:
            names.update(p for p in path.relative_to(root).with_suffix("").parts if _private(p))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                if modules_and_functions and _private(node.name):
                    names.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                        names.add(item.name)
                    targets = item.targets if isinstance(item, ast.Assign) else \
                        [item.target] if isinstance(item, ast.AnnAssign) else []
                    names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif (modules_and_functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and _private(node.name)):
                names.add(node.name)
    return names


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(), str(p))
            for p in sorted((ROOT / "orchestrator").rglob("*.py"))}


def private_uses(tree: ast.Module, optuna_names: set[str]) -> list[str]:
    """Each use of one of ``optuna_names`` in ``tree``, as ``line: code``."""
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Import):
            hit = any(a.name.split(".")[0] == "optuna" and any(map(_private, a.name.split("."))) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            hit = any(map(_private, node.module.split("."))) or any(_private(a.name) for a in node.names)
        elif isinstance(node, ast.Attribute):
            hit = node.attr in optuna_names and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            hit = (len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                   and node.args[1].value in optuna_names)
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def optuna_sql(tree: ast.Module, tables: set[str]) -> list[str]:
    """Each string in ``tree`` (docstrings aside) that is SQL against one of ``tables``."""
    table = re.compile(r"\b(" + "|".join(sorted(tables)) + r")\b")
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}  # read whole
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | parts:
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        else:
            continue
        if (SQL_WORD.search(text) and table.search(text)) or (text in tables and "_" in text):
            found.append(f"{node.lineno}: {text[:80]!r}")
    return found


def _optuna_private_names() -> set[str]:
    import optuna

    return _private_names(Path(optuna.__file__).parent, True) - _private_names(ROOT / "orchestrator", False)


def _optuna_tables() -> set[str]:
    from optuna.storages._rdb import models

    return set(models.BaseModel.metadata.tables)


def test_only_the_door_uses_optunas_private_names() -> None:
    names = _optuna_private_names()
    assert {"_storage", "_study_id", "_trial_id", "_backend", "_get_stale_trial_ids", "_CachedStorage"} <= names
    uses = {path: found for path, tree in _modules().items() if (found := private_uses(tree, names))}
    assert DOOR in uses  # the check sees what the door does
    del uses[DOOR]
    assert uses == {}, "Optuna's private names outside the door: give each a function in " + DOOR


def test_only_the_sql_module_queries_optunas_tables() -> None:
    tables = _optuna_tables()
    assert {"trials", "studies", "trial_values", "trial_user_attributes", "trial_heartbeats"} <= tables
    found = {path: hits for path, tree in _modules().items() if (hits := optuna_sql(tree, tables))}
    assert SQL_MODULE in found  # the check sees the queries where they are
    del found[SQL_MODULE]
    assert found == {}, "SQL against Optuna's tables outside " + SQL_MODULE


def test_the_checks_find_what_they_are_for() -> None:
    """Each form the checks look for is found, and the orchestrator's own names are not."""
    names = _optuna_private_names()
    code = ast.parse(
        "from optuna.storages._heartbeat import is_heartbeat_enabled\n"
        "import optuna.storages._rdb.models\n"
        "from optuna.storages import _CachedStorage\n"
        "x = study._storage\n"
        "y = getattr(storage, '_backend', None)\n"
        "z = self._storage\n"  # a class's own attribute
        "w = self.lock._lock\n"  # a name the orchestrator's classes define too
        "import optuna.trial\n"
        "def _storage(): pass\n")
    assert [line.split(":")[0] for line in private_uses(code, names)] == ["1", "2", "3", "4", "5"]
    tables = _optuna_tables()
    sql = ast.parse(
        "a = 'SELECT count(*) FROM trials t WHERE t.state = ?'\n"
        "b = f'SELECT x.trial_id FROM {table} x JOIN trials t ON t.trial_id = x.trial_id'\n"
        "c = ('trial_user_attributes', 1)\n"
        "d = {'trials': 3}\n"
        "e = 'SELECT count(*) FROM runs r'\n"  # MLflow's table
        "f = 'the trials from the study'\n")
    assert [line.split(":")[0] for line in optuna_sql(sql, tables)] == ["1", "2", "3"]
