"""An experiment module's parameter names, read from its source without running it.

The probe imports the module (and torch: about 12 s here) to read ``PARAMS``; most modules declare
it as a literal at the top (``PARAMS = {"hidden_size": 256, ...}``), which ``ast`` reads in
milliseconds, so that a misspelled parameter is found before anything starts (``--dry-run``
included). Anything else (``PARAMS`` built by code, changed after it is made, imported from
elsewhere, or not there) is left to the probe: ``None``.
"""

from __future__ import annotations

import ast
from pathlib import Path

NAME = "PARAMS"


def declared_params(source: str) -> list[str] | None:
    """The keys of ``PARAMS`` where the module's top level assigns it once, to a dict literal
    with string keys, and nothing else at the top level changes it; else None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None  # the probe says what is wrong with it
    found: list[str] | None = None
    for node in tree.body:
        target_value = _assignment(node)
        if target_value is not None:
            if found is not None:
                return None  # assigned twice
            value = target_value
            if not isinstance(value, ast.Dict) or not all(
                    isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
                return None  # built by code, or ** unpacking (a key of None)
            found = [k.value for k in value.keys]  # type: ignore[union-attr]  # every key a str constant (above)
        elif _touches(node):
            return None  # PARAMS.update(...), PARAMS[k] = ..., from x import PARAMS, a loop...
    return found


def _assignment(node: ast.stmt) -> ast.expr | None:
    """The value of ``PARAMS = ...`` or ``PARAMS: T = ...``; None for any other statement."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
            and node.targets[0].id == NAME:
        return node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == NAME \
            and node.value is not None:
        return node.value
    return None


MUTATORS = ("update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__", "__ior__")


def _touches(node: ast.stmt) -> bool:
    """Whether a top-level statement (a function's body included: it may be called at import) may
    bind or change ``PARAMS``; reading it (``{**PARAMS, **params}``, ``PARAMS.get``) is fine."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == NAME:
        return True
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == NAME or a.name == "*" for a in node.names)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == NAME and not isinstance(sub.ctx, ast.Load):
            return True
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == NAME \
                and sub.attr in MUTATORS:
            return True  # PARAMS.update(...)
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id == NAME \
                and not isinstance(sub.ctx, ast.Load):
            return True  # PARAMS["x"] = ..., del PARAMS["x"]
        if isinstance(sub, (ast.Global, ast.Nonlocal)) and NAME in sub.names:
            return True
        if isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name) and sub.target.id == NAME:
            return True  # PARAMS |= {...}
    return False


def module_params(origin: str) -> list[str] | None:
    """``declared_params`` of the module file at ``origin`` (a package: its ``__init__.py``);
    None where it cannot be read."""
    path = Path(origin)
    if path.is_dir():
        path = path / "__init__.py"
    if path.suffix != ".py":
        return None  # an extension module, a namespace package: the probe
    try:
        return declared_params(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def lacks_build(origin: str) -> bool:
    """Whether the module file at ``origin`` surely binds no top-level ``build`` (no ``def``,
    assignment or import of that name, no ``import *``, no module ``__getattr__``): the probe would
    refuse it in seconds, the dry run did not see it (an experiment tour). False where unsure."""
    path = Path(origin) / "__init__.py" if Path(origin).is_dir() else Path(origin)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.suffix == ".py" else None
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    if tree is None:
        return False
    for node in ast.walk(tree):  # anywhere: a build bound under `if`/`try` counts
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in ("build", "__getattr__"):
            return False
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                a.name == "*" or (a.asname or a.name.split(".")[0]) == "build" for a in node.names):
            return False
        if isinstance(node, ast.Name) and node.id == "build" and isinstance(node.ctx, ast.Store):
            return False
        if isinstance(node, ast.Name) and node.id == "globals":
            return False
    return True
