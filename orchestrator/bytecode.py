"""Whether torch's modules are compiled to bytecode where this Python can use them, without
importing torch (the parent side never does).

pip compiles every module it installs, so a venv's torch has its ``.pyc`` files. Some images ship
torch without them and set ``PYTHONDONTWRITEBYTECODE=1`` (common in Dockerfiles), or install it
into a read-only folder: then every process that imports torch compiles its modules first. On the
lent H100 image that made ``import torch`` take 4-7 s against 1.8-2.4 s once compiled, and
``import torch, torch._dynamo`` 9-11 s against 3.7-4.1 s (``docs/gpu/imports/``): a sweep pays it
in the probe, in each slot's fork server and in every process a trial starts afresh.

The fix printed is ``compileall -qq``: torch ships a test file in Python 3.12 syntax
(``torch/testing/_internal/py312_intrinsics.py``) that an older Python cannot compile, and ``-q``
printed its SyntaxError (the rest compiled; the exit status is 1 either way, as pip's own
compiling ignores it).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys


def uncompiled(package: str = "torch") -> str | None:
    """One line when ``package`` has no bytecode here and Python will not write it; else None
    (no bytecode yet but writable: the first import writes it; not installed: the probe says so)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    if os.path.exists(importlib.util.cache_from_source(origin)):
        return None
    folder = os.path.dirname(origin)
    if sys.dont_write_bytecode:
        why = "PYTHONDONTWRITEBYTECODE is set"
    elif not os.access(folder, os.W_OK) and sys.pycache_prefix is None:
        why = "its folder is read-only"
    else:
        return None
    site = os.path.dirname(folder)
    return (f"{package} at {folder} has no compiled bytecode and Python will not write it ({why}): every "
            f"process that imports {package} compiles it first (import torch 2-3x slower). Compile it once: "
            f"{shlex.quote(sys.executable)} -m compileall -qq {shlex.quote(site)}")
