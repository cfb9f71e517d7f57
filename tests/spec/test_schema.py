"""The spec's JSON Schema and reference page (``orchestrator.spec.schema``, ``orchestrator.spec.doc``):
the committed copies are what the generator writes now, every shipped spec carries the editor's
modeline and validates, and the schema agrees with the loader: the same keys, words and limits,
and it accepts every spec the loader accepts (the loader alone checks rules that join fields)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from jsonschema import Draft7Validator, Draft202012Validator

from conftest import ORCHESTRATE, ROOT
from orchestrator.spec import knobs
from orchestrator.errors import SpecError
from orchestrator.spec.schema import REFERENCE_FILE, REGENERATE, SCHEMA_FILE, schema_json, section, spec_schema, type_schema
from orchestrator.spec.load import load_spec
from orchestrator.spec.doc import reference
from orchestrator.spec.model import DIRECTIONS, SAMPLERS, Bound, Direction, Sampler
from orchestrator.spec.yamlsource import load_yaml

SCHEMA = spec_schema()
VALIDATORS = (Draft202012Validator(SCHEMA), Draft7Validator(SCHEMA))  # editors read it as draft-07
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))
MODELINE = "# yaml-language-server: $schema=../docs/spec.schema.json"
HEAD = "name: t\nexperiment: experiments.mlp\n"


def errors(data: Any) -> list[str]:
    """The schema's complaints about ``data``, the same from both dialects."""
    found = [sorted(e.message for e in v.iter_errors(data)) for v in VALIDATORS]
    assert found[0] == found[1], found
    return found[0]


def spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("committed, generate", [(SCHEMA_FILE, schema_json), (REFERENCE_FILE, reference)],
                         ids=["schema", "reference"])
def test_the_committed_file_is_what_the_generator_writes_now(committed: str, generate: Any) -> None:
    assert (ROOT / committed).read_text() == generate(), (
        f"{committed} is out of date with orchestrator/spec/model.py (or the tables the schema reads); "
        f"regenerate both files at the repository root with:\n    {REGENERATE}")


def test_the_schema_is_a_valid_draft_2020_12_and_draft_07_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "$ref" not in json.dumps(SCHEMA)  # draft-07 ignores a $ref's siblings: none are used


def test_orchestrate_schema_prints_the_schema() -> None:
    proc = subprocess.run([ORCHESTRATE, "schema"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert json.loads(proc.stdout) == SCHEMA
    page = subprocess.run([ORCHESTRATE, "schema", "--format", "markdown"], capture_output=True, text=True, timeout=60)
    assert page.returncode == 0 and page.stdout == reference()


def test_there_are_shipped_specs() -> None:
    assert len(SHIPPED) >= 10


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_spec_names_the_schema_and_validates(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first == MODELINE
    target = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert target == (ROOT / SCHEMA_FILE).resolve() and target.is_file()
    load_spec(path)  # the loader accepts it too
    assert errors(load_yaml(path)[0]) == []


REPRESENTATIVE = {
    "minimal": "",
    "empty sections": "fixed:\nspace:\nobjective:\nsearch:\ntrial:\n",
    "everything": """
device: cpu
devices: cpu:0-0
fixed: {hidden_size: 64, dtype: bfloat16, lr: 1, cpu_memory_limit_gib: 2, optimizer: adamw}
space:
  batch_size: [8, 16]
  activation_checkpointing: [false, true]
  grad_accum_steps: {low: 1, high: 4, step: 1}
objective:
  metrics: {samples_per_s: maximize, peak_memory_gib: minimize}
  constraints: {peak_memory_gib: {max: 12}, samples_per_s: {min: 1}}
search:
  sampler: nsga2
  n_trials: 5
  seed: 0
  max_failures: 0
  timeout_min: 0.5
  skip_predicted_oom: false
  allow_swap: true
  grace_period_s: 2
  memory_order: {hidden_size: increasing, optimizer: {sgd: 0, adamw: 1}}
trial: {warmup_steps: 1, measure_steps: 1, min_measure_s: 0, timeout_s: 30, repeats: 20}
storage: sqlite:///elsewhere/optuna.db
tracking_uri: http://127.0.0.1:5000
""",
    "continuous ranges": """
space:
  lr: {low: 1.0e-5, high: 1.0e-2, log: true}
  scale: {low: 0.5, high: 2}
objective: {metric: step_time_ms_p50, direction: minimize}
search: {sampler: tpe, n_trials: 10, patience: 3}
""",
    "devices as a list, a swept device": "devices: [cpu:0-0, cpu:1-1]\nspace: {device: [cpu], batch_size: [4]}\n",
    "devices: auto": "devices: auto\nspace: {batch_size: [4]}\n",
}


@pytest.mark.parametrize("body", REPRESENTATIVE.values(), ids=REPRESENTATIVE.keys())
def test_the_schema_accepts_what_the_loader_accepts(tmp_path: Path, body: str) -> None:
    path = spec_file(tmp_path, HEAD + body.lstrip())
    load_spec(path)
    assert errors(load_yaml(path)[0]) == []


UNKNOWN = [
    ("top level", "nmae: x\n", "nmae"),
    ("search", "search: {sampler: tpe, n_trails: 5}\n", "n_trails"),
    ("trial", "trial: {repeat: 3}\n", "repeat"),
    ("objective", "objective: {metric: loss, directon: minimize}\n", "directon"),
    ("objective.metrics", "objective: {metrics: {throughput: maximize}}\n", "throughput"),
    ("objective.constraints", "objective: {constraints: {peak_memory: {max: 1}}}\n", "peak_memory"),
    ("a constraint", "objective: {constraints: {peak_memory_gib: {maximum: 1}}}\n", "maximum"),
    ("a range", "space: {batch_size: {low: 1, high: 4, stepp: 1}}\n", "stepp"),
]


@pytest.mark.parametrize("body, key", [(b, k) for _, b, k in UNKNOWN], ids=[w for w, _, _ in UNKNOWN])
def test_an_unknown_key_is_refused_by_the_schema_and_the_loader(tmp_path: Path, body: str, key: str) -> None:
    path = spec_file(tmp_path, HEAD + body)
    with pytest.raises(SpecError, match="unknown key"):
        load_spec(path)
    found = errors(load_yaml(path)[0])
    assert found and any(key in message for message in found), found


def _loader_keys(tmp_path: Path, body: str) -> list[str]:
    """The keys the loader lists as valid after an unknown one."""
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file(tmp_path, HEAD + body))
    return re.search(r"valid keys are (.*)$", str(caught.value), re.M).group(1).split(", ")


SECTIONS = [  # (where, a spec with an unknown key there, the schema's properties there)
    ("top level", "zzz: 1\n", lambda s: s),
    ("search", "search: {zzz: 1}\n", lambda s: s["properties"]["search"]),
    ("trial", "trial: {zzz: 1}\n", lambda s: s["properties"]["trial"]),
    ("objective", "objective: {zzz: 1}\n", lambda s: s["properties"]["objective"]),
    ("objective.metrics", "objective: {metrics: {zzz: maximize}}\n",
     lambda s: s["properties"]["objective"]["properties"]["metrics"]),
    ("objective.constraints", "objective: {constraints: {zzz: {max: 1}}}\n",
     lambda s: s["properties"]["objective"]["properties"]["constraints"]),
    ("a constraint", "objective: {constraints: {loss: {zzz: 1}}}\n",
     lambda s: s["properties"]["objective"]["properties"]["constraints"]["properties"]["loss"]),
    ("a range", "space: {zzz: {low: 1, high: 2, zzz: 1}}\n",
     lambda s: s["properties"]["space"]["additionalProperties"]["anyOf"][1]),
]


@pytest.mark.parametrize("body, part", [(b, p) for _, b, p in SECTIONS], ids=[w for w, _, _ in SECTIONS])
def test_each_mapping_has_the_keys_the_loader_accepts(tmp_path: Path, body: str, part: Any) -> None:
    schema = part(SCHEMA)
    assert schema["additionalProperties"] is False
    loader = _loader_keys(tmp_path, body)
    assert sorted(schema["properties"]) == sorted(loader) and len(set(loader)) == len(loader)


def test_the_words_in_the_types_are_the_words_the_loader_checks() -> None:
    assert typing.get_args(Sampler) == SAMPLERS
    assert typing.get_args(Direction) == DIRECTIONS


def _settings() -> list[tuple[str, str, dict[str, Any]]]:
    return [(name, key, prop) for name in ("search", "trial")
            for key, prop in SCHEMA["properties"][name]["properties"].items()]


def _limit_cases() -> list[tuple[str, Any, bool]]:
    """(section.key, value, accepted) at and just past every limit the schema states."""
    cases = []
    forms = [(name, key, form) for name, key, prop in _settings() for form in prop.get("anyOf", [prop])]
    for name, key, prop in forms:  # a number or a word (trial.repeats: auto): each form's limits
        integer = "integer" in prop.get("type", ())
        below = 1 if integer else 0.5
        if "minimum" in prop:
            cases += [(f"{name}.{key}", prop["minimum"], True), (f"{name}.{key}", prop["minimum"] - below, False)]
        if "maximum" in prop:
            cases += [(f"{name}.{key}", prop["maximum"], True), (f"{name}.{key}", prop["maximum"] + below, False)]
        if "exclusiveMinimum" in prop:
            cases += [(f"{name}.{key}", prop["exclusiveMinimum"], False),
                      (f"{name}.{key}", prop["exclusiveMinimum"] + below, True)]
        for word in prop.get("enum", ()):
            if word is not None:
                cases.append((f"{name}.{key}", word, True))
        if "enum" in prop:
            cases.append((f"{name}.{key}", "no_such_word", False))
    return cases


LIMITS = _limit_cases()


def test_the_limit_table_covers_the_settings_with_limits() -> None:
    keys = {where for where, _, _ in LIMITS}
    assert {"search.n_trials", "search.grace_period_s", "search.sampler", "trial.repeats", "trial.timeout_s",
            "trial.min_measure_s"} <= keys


@pytest.mark.parametrize("where, value, accepted", LIMITS, ids=[f"{w}={v}" for w, v, _ in LIMITS])
def test_the_schema_s_limits_and_words_are_the_loader_s(tmp_path: Path, where: str, value: Any,
                                                         accepted: bool) -> None:
    name, key = where.split(".")
    body = f"space: {{batch_size: [8, 16]}}\n{name}:\n  {key}: {json.dumps(value)}\n"
    path = spec_file(tmp_path, HEAD + body)
    assert (errors(load_yaml(path)[0]) == []) is accepted
    if accepted:
        load_spec(path)
    else:
        with pytest.raises(SpecError, match=re.escape(where)):
            load_spec(path)


SAMPLES = (0, 1, 2, -1, 0.5, 1.5, 2.0, 2.5, True, False, None, "", " ", "float32", "adamw", "set_to_none", "mps",
           "expandable_segments:True", "a:b,c:d", "a:b,c", "nonsense", [1], {"a": 1})


@pytest.mark.parametrize("name", list(knobs.KNOBS))
def test_each_knob_s_schema_is_its_rule(name: str) -> None:
    """The loader's rule (``Knob.check``, as ``check_value`` applies it) and the schema the
    knob publishes agree on every sample, but for one thing JSON Schema cannot say: an integral
    float (``2.0``) is an ``integer`` to it."""
    knob = knobs.KNOBS[name]
    validator = Draft202012Validator(knob.check.schema)
    for value in SAMPLES:
        if knob.kind == "int" and isinstance(value, float) and value.is_integer():
            continue
        loaded = float(value) if knob.kind == "float" and knobs.is_int(value) else value
        assert (knob.check(loaded) is None) == validator.is_valid(value), (name, value)


def test_every_key_has_a_description() -> None:
    """A field without a docstring would be an empty cell on the reference page."""
    top = SCHEMA["properties"]
    keyed = {"": top, **{f"{name}.": top[name]["properties"] for name in ("objective", "search", "trial")},
             "space.<range>.": top["space"]["additionalProperties"]["anyOf"][1]["properties"],
             "space.": top["space"]["properties"]}
    for where, props in keyed.items():
        for key, prop in props.items():
            assert prop.get("description"), f"{where}{key}: give it a docstring in orchestrator/spec/model.py"


def test_a_new_setting_flows_into_the_schema_from_its_type_alone() -> None:
    """What another field of SearchSettings gets with no change to the generator."""
    @dataclasses.dataclass(frozen=True)
    class Settings:
        stop: Literal["auto", "budget"] = "auto"
        outage_s: typing.Annotated[float, Bound(above=0)] | None = None

    schema = section(Settings, ("search",))
    assert schema["additionalProperties"] is False
    assert schema["properties"] == {"stop": {"enum": ["auto", "budget"], "default": "auto"},
                                    "outage_s": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": None}}
    with pytest.raises(TypeError, match=r"search\.when: .*FRAGMENTS"):
        type_schema(list[int], "search.when")


_fuzz = importlib.util.spec_from_file_location("fuzz_specs", ROOT / "bench" / "fuzz_specs.py")
fuzz_specs = importlib.util.module_from_spec(_fuzz)
sys.modules.setdefault("fuzz_specs", fuzz_specs)
_fuzz.loader.exec_module(fuzz_specs)


def test_the_schema_accepts_every_mutated_spec_the_loader_accepts() -> None:
    """The fuzzer's mutations of the shipped specs (bench/fuzz_specs.py): whatever the loader
    takes, the schema takes; and both refuse some, so neither side is empty."""
    workdir = Path(tempfile.mkdtemp(prefix="schema-fuzz-"))
    seen = {"loaded": 0, "refused by both": 0}

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(fuzz_specs.mutated_spec())
    def one(data: bytes) -> None:
        path = workdir / "spec.yaml"
        path.write_bytes(data)
        try:
            load_spec(path)
        except SpecError:
            try:
                if errors(load_yaml(path)[0]):
                    seen["refused by both"] += 1
            except SpecError:  # not YAML the loader can read: nothing to validate
                pass
            return
        seen["loaded"] += 1
        assert errors(load_yaml(path)[0]) == [], data

    try:
        one()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # both well away from empty (the split moves with the shipped specs the fuzzer mutates: 63/29
    # with 3 more landscape specs, from 30+/30+)
    assert seen["loaded"] >= 20 and seen["refused by both"] >= 20, seen
