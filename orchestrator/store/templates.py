"""Empty SQLite stores kept as templates: a new project's store is a copy, not a build.

Optuna builds a new study database by creating its tables and stamping its schema's version
(alembic), ~0.1 CPU-s; MLflow runs every one of its migrations, seconds (``tracking.new_store``
keeps its own template). The first store built with a version of the library is kept in
``$XDG_CACHE_HOME/orchestrate`` (``~/.cache/orchestrate``); later ones are a copy, which the
library itself opens and checks before it is used: any doubt (no template, an unreadable one,
another schema), and the library builds the store as before.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from orchestrator.urls import sqlite_path


def cache_dir() -> Path:
    """Where templates are kept (``$XDG_CACHE_HOME/orchestrate``, else ``~/.cache/orchestrate``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrate"


def from_template(url: str, name: str, build: Callable[[str], Any], check: Callable[[str], Any]) -> None:
    """Create the SQLite store at ``url`` (a path nothing uses yet: ``study.create_sqlite_atomically``
    builds under a temporary name) as a copy of the template ``name``, if ``check(url)`` accepts
    the copy (it raises for a store it cannot use); else ``build(url)``, and keep a copy of what
    it built as the template."""
    target = sqlite_path(url)
    assert target is not None, url
    template = cache_dir() / name
    if template.is_file():
        try:
            shutil.copyfile(template, target)
            check(url)
            return
        except Exception:  # noqa: BLE001 - any doubt about the template: the library builds the store
            target.unlink(missing_ok=True)
    build(url)
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        tmp = template.with_name(f".{template.name}.{os.getpid()}.{time.monotonic_ns()}")
        shutil.copyfile(target, tmp)
        tmp.replace(template)  # atomic: a reader sees the old template or the new, never half of one
    except OSError:
        pass  # no cache to keep it in: the next new store is built again
