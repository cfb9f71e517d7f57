"""The sweep spec's JSON Schema, built from the spec's model, and ``orchestrate schema``.

One source for the schema and the reference page (``orchestrator.spec.doc`` writes the page from
this schema): the YAML-facing fields of ``specmodel``'s dataclasses (name, type, default and the
docstring under each, read with ``ast``) and the tables the loader already checks against
(``spec.TOP_KEYS``, the ``Literal`` words, ``knobs.KNOBS`` with each knob's ``Rule``,
``dominance.ORDER_WORDS``, the metrics an objective may name, the device-slot pattern).

A field added to ``SearchSettings`` or ``TrialSettings`` flows through with no change here when its
type is a ``Literal``, ``bool``, ``int``, ``float`` or ``str`` (``Annotated[..., Bound(...)]`` for
limits, ``| None`` where it may be left out): give it a docstring and run ``orchestrate schema``
again (``tests/spec/test_schema.py`` says the command). A field of another shape gets an entry in
``FRAGMENTS``; until then building the schema fails, naming the field.

The dialect is draft 2020-12, using only keywords that draft-07 validators (yaml-language-server,
which editors use) read the same way: no ``$ref``, no ``prefixItems``. The schema checks shapes,
words and limits; rules that join two fields are the loader's (``specdoc.LOADER_ONLY`` lists them).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import json
import re
import types
import typing
from typing import Any, Callable

from orchestrator.spec import knobs
from orchestrator.spec import model as specmodel
from orchestrator.metrics import OBJECTIVE_METRICS
from orchestrator.spec.load import EXPERIMENT_PATTERN, NAME_PATTERN, REQUIRED_TOP, TOP_KEYS
from orchestrator.spec.model import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, DIRECTIONS, ORDER_WORDS, Bound, SweepSpec
from orchestrator.spec.rules import DEVICE_SLOT
from orchestrator.spec.space_rules import RANGE_KEYS

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "docs/spec.schema.json"
REFERENCE_FILE = "docs/reference/spec.md"
REGENERATE = f"orchestrate schema > {SCHEMA_FILE} && orchestrate schema --format markdown > {REFERENCE_FILE}"
"""The command that rewrites both committed files, run at the repository's root."""

SCALAR = {"type": ["string", "number", "boolean"]}
_PLAIN = {bool: "boolean", int: "integer", float: "number", str: "string"}


def one_line(doc: str) -> str:
    """A docstring as one Markdown line: wrapped lines joined, ``rst`` literals as `markdown`."""
    return re.sub(r"\s+", " ", inspect.cleandoc(doc)).replace("``", "`").strip()


@functools.cache
def field_docs() -> dict[tuple[str, str], str]:
    """(class, field) -> the docstring written under the field in ``specmodel``."""
    docs: dict[tuple[str, str], str] = {}
    try:
        source = inspect.getsource(specmodel)
    except OSError:  # installed without its sources: the schema, without descriptions
        return docs
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt, after in zip(cls.body, cls.body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[(cls.name, stmt.target.id)] = one_line(after.value.value)
    return docs


def type_schema(hint: object, where: str) -> dict[str, Any]:
    """The JSON Schema of a field's type hint (``where`` names the field in errors)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        schema = type_schema(args[0], where)
        for extra in args[1:]:
            if isinstance(extra, Bound):
                schema.update(_limits(extra))
        return schema
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return nullable(type_schema(next(a for a in args if a is not type(None)), where))
    if origin in (typing.Union, types.UnionType):  # e.g. a number or a word (trial.repeats: auto)
        return {"anyOf": [type_schema(a, where) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if hint in _PLAIN:
        return {"type": _PLAIN[hint]}
    if dataclasses.is_dataclass(hint):
        return section(hint, tuple(where.split(".")))  # type: ignore[arg-type]  # a field's annotation: a class, not an instance
    raise TypeError(f"{where}: no JSON Schema for the type {hint!r}: use a Literal, bool, int, float or str "
                    "(Annotated with a Bound for limits), or give the field an entry in orchestrator.spec.schema.FRAGMENTS")


def _limits(bound: Bound) -> dict[str, Any]:
    names = {"minimum": bound.minimum, "maximum": bound.maximum, "exclusiveMinimum": bound.above}
    return {key: value for key, value in names.items() if value is not None}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or YAML's null (a key written with no value)."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def section(cls: type, path: tuple[str, ...]) -> dict[str, Any]:
    """A section of the spec from its dataclass: every field a key, nothing else. An empty
    section (every entry commented out) is null, and counts as absent, as in the loader."""
    hints = typing.get_type_hints(cls, include_extras=True)
    props = {f.name: field_schema(cls, f, hints[f.name], path + (f.name,)) for f in dataclasses.fields(cls)}
    return {"type": ["object", "null"], "additionalProperties": False, "properties": props}


def field_schema(cls: type, f: dataclasses.Field, hint: object, path: tuple[str, ...]) -> dict[str, Any]:
    make = FRAGMENTS.get(path)
    schema = make() if make else type_schema(hint, ".".join(path))
    doc = field_docs().get((cls.__name__, f.name))
    out = {"description": doc} if doc else {}
    out.update(schema)
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if default is not dataclasses.MISSING and "default" not in out and _plain_json(default):
        out["default"] = default
    return out


def _plain_json(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain_json(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


# --- the fields whose YAML form is not their type: written from the loader's tables -------------

def _knob_value(knob: knobs.Knob) -> dict[str, Any]:
    schema = getattr(knob.check, "schema", None)
    if schema is None:
        raise TypeError(f"knob {knob.name}: its check has no JSON Schema; build it with knobs.Rule")
    return {"description": knob.doc, **copy.deepcopy(schema)}


def _choices(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "minItems": 1, "uniqueItems": True, "items": item}


def _range(bound: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    parts = {
        "low": {"description": "Lower bound, inclusive.", **bound},
        "high": {"description": "Upper bound, inclusive.", **bound},
        "step": {"description": "Spacing of the values the range lists (a grid needs it); high - low must be a "
                                "multiple of it. Without it the range is continuous and sampled.", **step},
        "log": {"description": "Sample on a log scale (needs low > 0; not with step).", "type": "boolean",
                "default": False},
    }
    return {"type": "object", "additionalProperties": False, "required": ["low", "high"],
            "properties": {key: parts[key] for key in RANGE_KEYS}}


def _fixed() -> dict[str, Any]:
    props: dict[str, Any] = {name: _knob_value(k) for name, k in knobs.KNOBS.items() if name != "device"}
    props["device"] = False  # the top-level `device:` key, or swept in space
    return {"type": ["object", "null"], "properties": props, "additionalProperties": SCALAR}


def _space() -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name, knob in knobs.KNOBS.items():
        value = _knob_value(knob)
        doc = value.pop("description")
        forms = [_choices(value)]
        if knob.kind in ("int", "float"):
            step = {"type": "integer", "minimum": 1} if knob.kind == "int" else {"type": "number", "exclusiveMinimum": 0}
            forms.append(_range(value, step))
        props[name] = {"description": doc, "anyOf": forms}
    other = {"anyOf": [_choices(SCALAR), _range({"type": "number"}, {"type": "number", "exclusiveMinimum": 0})]}
    return {"type": ["object", "null"], "properties": props, "additionalProperties": other}


def _objective() -> dict[str, Any]:
    bound = {"type": "number"}
    return {
        "type": ["object", "null"], "additionalProperties": False,
        "properties": {
            "metric": {"description": "The metric to optimize (with direction); or use metrics.",
                       "enum": list(OBJECTIVE_METRICS), "default": "samples_per_s"},
            "direction": {"description": "Whether more or less of metric is better.",
                          "enum": list(DIRECTIONS), "default": "maximize"},
            "metrics": {"description": "Several metrics, each with its direction: a multi-objective study "
                                       "(instead of metric and direction).",
                        "type": "object", "minProperties": 1, "additionalProperties": False,
                        "properties": {m: {"enum": list(DIRECTIONS)} for m in OBJECTIVE_METRICS}},
            "constraints": {"description": "Metric -> {max: N} or {min: N}: a trial that breaks one is infeasible.",
                            "type": ["object", "null"], "additionalProperties": False,
                            "properties": {m: {"type": "object", "additionalProperties": False,
                                               "minProperties": 1, "maxProperties": 1,
                                               "properties": {"max": bound, "min": bound}}
                                           for m in OBJECTIVE_METRICS}},
        },
        "not": {"type": "object", "anyOf": [{"required": ["metrics", "metric"]}, {"required": ["metrics", "direction"]}]},
    }


def _devices() -> dict[str, Any]:
    slot = DEVICE_SLOT.pattern
    return {"anyOf": [
        {"type": "string", "pattern": rf"^\s*(auto|{slot}(\s*,\s*{slot})*)\s*$"},
        {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "pattern": f"^(auto|{slot})$"}},
        {"type": "null"},
    ]}


def _memory_order() -> dict[str, Any]:
    rank = {"type": "object", "additionalProperties": {"type": "number"}}
    return {"type": ["object", "null"], "additionalProperties": {"anyOf": [{"enum": list(ORDER_WORDS)}, rank]}}


FRAGMENTS: dict[tuple[str, ...], Callable[[], dict[str, Any]]] = {
    ("name",): lambda: {"type": "string", "pattern": f"^{NAME_PATTERN}$"},
    ("experiment",): lambda: {"type": "string", "pattern": f"^{EXPERIMENT_PATTERN}$"},
    ("script",): lambda: {"type": "string", "pattern": r"\S"},
    ("args",): lambda: {"type": ["array", "null"], "items": {"type": ["string", "number"]}, "default": []},
    ("samples_per_step",): lambda: {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                                              {"type": "string", "pattern": r"\S"}]},
    ("device",): lambda: {"enum": ["auto", *knobs.DEVICES], "default": "auto"},
    ("devices",): _devices,
    ("fixed",): _fixed,
    ("space",): _space,
    ("objective",): _objective,
    ("storage",): lambda: {"type": "string", "pattern": r"\S", "default": DEFAULT_STORAGE},
    ("tracking_uri",): lambda: {"type": "string", "pattern": r"\S", "default": DEFAULT_TRACKING_URI},
    ("search", "memory_order"): _memory_order,
}
"""YAML path -> the schema of a field whose YAML form its type does not say."""


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep spec."""
    hints = typing.get_type_hints(SweepSpec, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(SweepSpec)}
    return {
        "$schema": DIALECT,
        "title": "orchestrate sweep spec",
        "description": "A YAML sweep spec for orchestrate: what to train, which settings to try, what to "
                       "optimize. Generated by `orchestrate schema`.",
        "type": "object",
        "required": list(REQUIRED_TOP),
        "oneOf": [{"required": ["experiment"]}, {"required": ["script"]}],
        "additionalProperties": False,
        "properties": {key: field_schema(SweepSpec, fields[key], hints[key], (key,)) for key in TOP_KEYS},
    }


def schema_json() -> str:
    """The schema as the committed ``docs/spec.schema.json`` holds it."""
    return json.dumps(spec_schema(), indent=2) + "\n"
