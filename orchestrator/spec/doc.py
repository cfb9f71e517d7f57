"""The spec reference page (``docs/reference/spec.md``), written from the JSON Schema that
``orchestrator.spec.schema`` builds: the page and the schema cannot say different things. Pure text in,
text out; ``orchestrate schema`` prints the schema, ``--format markdown`` the page."""

from __future__ import annotations

import sys
from typing import Any

from orchestrator.spec import knobs
from orchestrator.errors import UsageParser
from orchestrator.spec.schema import REGENERATE, SCHEMA_FILE, schema_json, spec_schema
from orchestrator.spec.model import DEFAULT_ORDER, MAX_CONFIGURATIONS, ORDER_WORDS

LOADER_ONLY = (
    "A parameter is either in `fixed` or in `space`, never both; `fixed.device` is refused (use the top-level "
    "`device` or sweep it in `space`), and so is a top-level `device` beside `space.device`.",
    "A range: `low <= high`; with a `step`, `high - low` is a multiple of it (both ends are visited); `log: true` "
    "needs `low > 0` and no `step`; a knob that takes integers needs integer bounds and step; the bounds obey the "
    f"knob's rule. A range lists at most {MAX_CONFIGURATIONS:,} values, and a space of lists and stepped ranges "
    f"holds at most {MAX_CONFIGURATIONS:,} configurations.",
    "Numbers a parameter reads as integers are written as integers: the schema's `integer` admits `8.0`, the "
    "loader does not. Values must be finite (no `.inf`, `.nan`).",
    "`search.sampler: grid` needs a `step` on every range, and a range without a step (continuous) needs "
    "`search.n_trials`.",
    "`effective_batch_size` needs `batch_size` as a fixed value, a list or a stepped range, every batch size must divide every "
    "effective batch size, and `grad_accum_steps` is then derived (giving it too is an error).",
    "`mps_low_watermark_ratio` must not exceed `mps_high_watermark_ratio` (or MPS's default high ratio, "
    f"{knobs.MPS_DEFAULT_HIGH_WATERMARK}, when that is not given), for every combination the space holds.",
    "`search.patience` needs a single objective metric; `search.memory_order` names parameters of `space` (or "
    "`fixed`), and given as a mapping of value to rank must rank every choice of that parameter in `space`, and "
    "no other value.",
    "`devices`: a slot listed twice, `auto` beside other slots, and a core range `cpu:A-B` with A > B are refused.",
    "`storage` and `tracking_uri`: a SQLite URL needs a file path (not `:memory:`), a server database's driver "
    "must be installed, and MLflow 3 refuses `file:` and plain folders as a tracking store.",
    "The experiment's own parameters (names that are not knobs): their names against its `PARAMS`, and their "
    "fixed values by its `validate_params`, in a subprocess, before anything runs; a swept value the experiment "
    "refuses ends that trial as `error`.",
)
"""Rules the loader enforces that the schema does not (they join two fields, or need the
experiment); listed on the reference page."""


def code(value: object) -> str:
    """A value as YAML writes it, in backticks."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def words(values: list[Any]) -> str:
    """``a``, ``b`` or ``c``."""
    shown = [code(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def _number(kind: str, s: dict[str, Any]) -> str:
    low, high, above = s.get("minimum"), s.get("maximum"), s.get("exclusiveMinimum")
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if above is not None and high is not None:
        return f"{kind} > {above} and <= {high}"
    if low is not None:
        return f"{kind} >= {low}"
    if above is not None:
        return f"{kind} > {above}"
    return kind


def value_text(s: Any) -> str:
    """What a schema admits, in a few words."""
    if s is False:
        return "not allowed"
    if "anyOf" in s:
        return " or ".join(dict.fromkeys(value_text(x) for x in s["anyOf"] if x.get("type") != "null"))
    if "enum" in s:
        return words(s["enum"])
    types = s.get("type")
    main = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    if main == ["string", "number", "boolean"]:
        return "text, number or boolean"
    if main == ["string", "number"]:
        return "text or number"
    if main == ["integer"] or main == ["number"]:
        return _number(main[0], s)
    if main == ["boolean"]:
        return "`true` or `false`"
    if main == ["string"]:
        return "text"
    if main == ["array"]:
        return f"list of {value_text(s['items'])}"
    if main == ["object"]:
        props = s.get("properties", {})
        if s.get("maxProperties") == 1:
            return " or ".join(f"`{{{key}: N}}`" for key in props)
        shapes = [value_text(v) for v in props.values()]
        if props and len(set(shapes)) == 1:
            return f"mapping of a name listed below to {shapes[0]}"
        return "mapping"
    return "see below"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(s: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    return code(s["default"]) if s.get("default") is not None else ""


def table(props: dict[str, Any], link: dict[str, str] | None = None, required: tuple[str, ...] = ()) -> list[str]:
    """One row per key: what it takes, its default (blank: absent unless given), what it does."""
    rows = ["| key | value | default | what |", "|---|---|---|---|"]
    for key, s in props.items():
        value = f"mapping: [below](#{link[key]})" if link and key in link else value_text(s)
        rows.append(f"| `{key}` | {_cell(value)} | {_cell(_default(s, key in required))} | "
                    f"{_cell(s.get('description', ''))} |")
    return rows


def _knob_rows(space: dict[str, Any]) -> list[str]:
    rows = ["| knob | values | in `space` | applies on | sets | what |", "|---|---|---|---|---|---|"]
    for name, s in space["properties"].items():
        knob = knobs.KNOBS[name]
        forms = s["anyOf"]
        sweep = "list or range" if len(forms) > 1 else "list"
        where = "all" if knob.devices == knobs.ALL else ", ".join(d for d in knobs.DEVICES if d in knob.devices)
        env = f"`{knob.env}`" if knob.env else ""
        rows.append(f"| `{name}` | {_cell(value_text(forms[0]['items']))} | {sweep} | {where} | {env} | "
                    f"{_cell(s['description'])} |")
    return rows


def _order_text(rule: object) -> str:
    if isinstance(rule, dict):
        return ", ".join(f"{code(value)} {rank}" for value, rank in rule.items())
    return f"`{rule}`"


def reference(schema: dict[str, Any] | None = None) -> str:
    schema = schema or spec_schema()
    top = schema["properties"]
    sections = ("objective", "search", "trial")
    lines = [
        "# Spec reference",
        "",
        f"<!-- Generated from orchestrator/spec/model.py by `orchestrate schema --format markdown`; do not edit. "
        f"Regenerate with: {REGENERATE} -->",
        "",
        "A sweep spec is a YAML mapping. `name` and `experiment` are required; every other key has a default. "
        "A key that is not listed here is an error (with a did-you-mean), at the top level and in every "
        "section; only `fixed` and `space` take names of your own (your experiment's parameters). A section "
        "left empty (every entry commented out) counts as absent. `orchestrate SPEC --dry-run` checks a "
        "spec and prints the plan without running anything.",
        "",
        f"This page and the JSON Schema [`spec.schema.json`](../spec.schema.json) (`{SCHEMA_FILE}`; "
        "`orchestrate schema` prints it) are generated from the same source, the spec's model. With the "
        "schema an editor completes and checks a spec as you type: the specs in `sweeps/` start with "
        "`# yaml-language-server: $schema=../docs/spec.schema.json`, which the YAML language server "
        "(VS Code's YAML extension, and others) reads.",
        "",
        "## Top level",
        "",
        *table(top, {key: key for key in (*sections, "fixed", "space")}, tuple(schema["required"])),
    ]
    for key in sections:
        s = top[key]
        link = {"memory_order": "searchmemory_order"} if key == "search" else None
        lines += ["", f"## {key}", "", s["description"], "", *table(s["properties"], link)]
        if key == "objective":
            lines += ["", "Metrics an objective may name: "
                      + ", ".join(code(m) for m in s["properties"]["metric"]["enum"]) + "."]
        if key == "search":
            lines += ["", "### search.memory_order", "",
                      f"How memory grows with a parameter: {', '.join(code(w) for w in ORDER_WORDS)}, or a mapping of "
                      "value to rank (higher = more memory, equal ranks alike). A configuration that needs at least "
                      "as much memory as one that ran out of memory is skipped; a parameter without an order must "
                      "be equal for that. Yours are merged over these defaults:", "",
                      "| parameter | order |", "|---|---|",
                      *(f"| `{name}` | {_order_text(rule)} |" for name, rule in DEFAULT_ORDER.items())]
    space = top["space"]
    rng = next(form for form in space["additionalProperties"]["anyOf"] if form["type"] == "object")
    lines += [
        "", "## fixed", "", top["fixed"]["description"],
        "Each value obeys its [knob's](#knobs) rule, or is one of your experiment's parameters (text, "
        "number or boolean).",
        "", "## space", "", space["description"], "",
        "- **A list of choices**: `batch_size: [8, 16, 32]` (at least one, no value twice).",
        "- **A range**: `lr: {low: 1.0e-5, high: 1.0e-3, log: true}`, bounds inclusive as in Optuna. "
        "A range whose numbers are all integers is an integer range.", "",
        *table(rng["properties"]),
        "", "### Knobs", "",
        "The harness's own parameters, fixed or swept. A knob the device does not read is reported as not "
        "applied and not searched there.", "",
        *_knob_rows(space),
        "", "## devices", "", top["devices"]["description"],
        "", "## Checked when the spec is loaded", "",
        "The schema checks shapes, words and limits. These rules join two fields or need the experiment, and "
        "only the loader checks them (`orchestrate SPEC --dry-run`; one line naming the file, line and field):",
        "", *(f"- {rule}" for rule in LOADER_ONLY), "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = UsageParser(prog="orchestrate schema", description="Print the sweep spec's JSON Schema (draft 2020-12), "
                    "or with --format markdown the spec reference page, both generated from the spec's model.")
    p.add_argument("--format", choices=("json", "markdown"), default="json")
    args = p.parse_args(argv[1:] if argv and argv[0] == "schema" else argv)
    if args.format == "markdown":
        sys.stdout.write(reference())
    else:
        sys.stdout.write(schema_json())
    return 0
