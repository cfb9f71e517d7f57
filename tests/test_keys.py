"""A configuration's canonical key (``keys.config_key``), made from memoized pieces for big
spaces, is the text it always was: ``json.dumps`` of the canonical values, keys sorted; and the
value keys a planner shares with its feasibility index are ``value_key``'s."""

from __future__ import annotations

import json
import random

import pytest

from orchestrator.keys import canonical_float, config_key, value_key, value_keys_of


def dumped(params: dict) -> str:
    """The key as it was written before the pieces (the reference)."""
    return json.dumps({k: (canonical_float(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                       for k, v in sorted(params.items())}, sort_keys=True)


CASES = [{}, {"a": 1}, {"a": 1.0}, {"a": True}, {"a": False, "b": 0}, {"b": 0.1 + 0.2, "a": "x"},
         {"a": None, "b": [1, 2]}, {"é": "ü", "x\n": 'q"'}, {"a": 1e-7, "b": 10**20, "c": float("inf")},
         {"z": {"n": 1}}, {"lr": 0.0003, "batch_size": 64, "dtype": "bfloat16"}]


@pytest.mark.parametrize("params", CASES, ids=[str(c)[:30] for c in CASES])
def test_the_key_is_the_json_it_always_was(params: dict) -> None:
    assert config_key(params) == dumped(params)


def test_random_configurations_give_the_same_keys_and_value_keys() -> None:
    rnd = random.Random(0)
    values = [1, 2.5, True, False, "bf16", None, 0.1 + 0.2, 3, 0.001, 1e-3 * 3]
    configs = [{rnd.choice("abcdef"): rnd.choice(values) for _ in range(rnd.randint(0, 5))} for _ in range(5000)]
    assert [config_key(c) for c in configs] == [dumped(c) for c in configs]
    assert value_keys_of(configs) == [[(n, value_key(n, v)) for n, v in c.items()] for c in configs]
    assert config_key({"a": 1}) != config_key({"a": True}) and config_key({"a": 1}) == config_key({"a": 1.0})
