"""An experiment's PARAMS read from its source (spec/declared.py): a literal is read, anything
else is left to the probe (None)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.spec.declared import declared_params, module_params


@pytest.mark.parametrize("source, names", [
    ("PARAMS = {'a': 1, 'b': None}", ["a", "b"]),
    ("from typing import Any\nPARAMS: dict[str, Any] = {\n  'a': 1,\n}\ndef build(p, d):\n  return {**PARAMS, **p}",
     ["a"]),
    ("PARAMS = {}", []),
    ("x = PARAMS = {'a': 1}", None),  # two targets: not the plain form
    ("PARAMS = dict(a=1)", None),  # built by code
    ("PARAMS = {'a': 1, **OTHER}", None),
    ("PARAMS = {1: 2}", None),
    ("PARAMS = {'a': 1}\nPARAMS['b'] = 2", None),
    ("PARAMS = {'a': 1}\nPARAMS.update(b=2)", None),
    ("PARAMS = {'a': 1}\nPARAMS = {'b': 1}", None),
    ("PARAMS = {'a': 1}\nfor k in 'bc':\n  PARAMS[k] = 0", None),
    ("from base import PARAMS", None),
    ("from base import *\nPARAMS = {'a': 1}", None),
    ("PARAMS = {'a': 1}\ndef f():\n  global PARAMS\n  PARAMS = {}", None),
    ("def build(p, d): ...", None),  # no PARAMS: the probe says the module takes any name
    ("PARAMS = {'a': ", None),  # a syntax error: the probe reports it
])
def test_a_literal_is_read_and_anything_else_left_to_the_probe(source: str, names: list[str] | None) -> None:
    assert declared_params(source) == names


def test_the_shipped_experiments(tmp_path: Path) -> None:
    assert module_params(str(ROOT / "experiments" / "mlp.py")) == [
        "in_features", "hidden_size", "num_layers", "num_classes", "lr", "seed"]
    assert module_params(str(ROOT / "experiments" / "hf.py")) is None  # its names are the config's fields
    assert "noise" in module_params(str(ROOT / "examples" / "my_experiment.py"))
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("PARAMS = {'width': 8}\n")
    assert module_params(str(package)) == ["width"]
    assert module_params(str(tmp_path / "missing.py")) is None
    assert module_params(str(tmp_path / "ext.so")) is None


@pytest.mark.parametrize("source, names", [
    ("PARAMS = {'a': 1}\ndef setup():\n  PARAMS['b'] = 2\nsetup()", None),  # a function may run at import
    ("PARAMS = {'a': 1}\ndef setup():\n  PARAMS.setdefault('b', 2)", None),
    ("PARAMS = {'a': 1}\nPARAMS |= {'b': 2}", None),
    ("PARAMS = {'a': 1}\ndef build(p, d):\n  return PARAMS.get('a'), PARAMS['a'], dict(PARAMS)", ["a"]),
])
def test_functions_that_change_it_count_and_those_that_read_it_do_not(source: str, names: list[str] | None) -> None:
    assert declared_params(source) == names
