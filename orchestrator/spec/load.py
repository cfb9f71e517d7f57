"""The sweep spec: load a YAML file, check every rule, and return a frozen ``SweepSpec``.

Every error names the file, the line, the field path, the rule and the value received, e.g.
``sweeps/x.yaml:12: space.batch_size[2]: batch sizes must be positive integers, got -8``.
Nothing here touches the disk besides reading the spec. The pieces: ``spec/model.py`` (what a checked
spec is), ``spec/rules.py`` (the rule of each section), ``spec/space_rules.py`` (the rules of the parameters:
fixed values, space entries and their combinations), this module (reading, overrides from flags,
and the rules that join the sections).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.spec import knobs
from orchestrator.spec.model import (DEFAULT_STORAGE, DEFAULT_TRACKING_URI, Choice, Constraint,  # noqa: F401
                                    Dimension, Range, SearchSettings, SweepSpec, TrialSettings)
from orchestrator.spec.rules import (Checker, check_devices, check_objective, check_search,  # noqa: F401
                                    check_trial, check_url, show)
from orchestrator.spec.script import check_script, refuse_loop_knobs
from orchestrator.spec.space_rules import check_combinations, check_dimension, check_space_size, check_value  # noqa: F401
from orchestrator.spec.yamlsource import load_yaml

if TYPE_CHECKING:
    from orchestrator.urls import Origins

# The data model lives in ``spec/model.py`` and the rules in ``spec/rules.py`` and ``spec/space_rules.py``; the names
# other modules use are re-exported here (above), so ``from orchestrator.spec.load import SweepSpec``
# stays the way in.

TOP_KEYS = ("name", "experiment", "script", "args", "samples_per_step", "device", "devices", "fixed", "space",
            "objective", "search", "trial", "storage", "tracking_uri")
REQUIRED_TOP = ("name",)
"""Besides ``name``: exactly one of ``experiment`` and ``script`` (``check_spec``)."""
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
NAME_MAX = 100
EXPERIMENT_PATTERN = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"


def load_guarded(path: str | Path, storage: str | None, tracking_uri: str | None) -> tuple[SweepSpec, Origins]:
    """The spec with the stores its command's flags and the environment pick (``urls.overrides``),
    its secrets kept out of the output (``urls.guard``): what every command but the sweep's (whose
    flags override more) reads first. Returns the spec and where each store came from."""
    from orchestrator.urls import guard, overrides

    stores, origins = overrides(storage, tracking_uri)
    spec = load_spec(path, stores)
    guard(spec, origins)
    return spec, origins


def load_spec(path: str | Path, overrides: dict[str, Any] | None = None) -> SweepSpec:
    """Read and check a spec. ``overrides`` maps flags (``--n-trials``) to (field path, value)."""
    path = Path(path)
    data, lines, spelled = load_yaml(path)
    flag_of: dict[tuple, str] = {}
    for flag, (field_path, value) in (overrides or {}).items():
        if value is None:
            continue
        node = data
        for part in field_path[:-1]:
            if isinstance(node, dict) and node.get(part) is None:  # absent or an empty section
                node[part] = {}
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):  # else check_spec reports the node that is not a mapping
            node[field_path[-1]] = value
            flag_of[tuple(field_path)] = flag
    return check_spec(data, path, lines, flag_of, spelled)


def check_spec(data: object, path: Path, lines: dict[tuple, int],
               flag_of: dict[tuple, str] | None = None,
               spelled: dict[tuple, str] | None = None) -> SweepSpec:
    """Every rule, each part of the spec checked on its own (``Checker.attempt``), so that one read
    reports every error, one line each. The rules that join parameters (their combinations, the
    space's size, a script's arguments) are checked once every parameter is valid on its own."""
    c = Checker(str(path), lines, flag_of or {}, spelled)
    top = c.mapping((), data, TOP_KEYS)  # not a mapping: nothing else can be checked

    def section(key: str) -> Any:
        """A section's mapping; an empty one (every entry commented out) counts as absent."""
        value = top.get(key)
        return {} if value is None else value

    name = c.attempt(lambda: _check_name(c, top), None)
    experiment = top.get("experiment")
    c.attempt(lambda: _check_workload(c, top), None)
    device = c.attempt(lambda: c.one_of(("device",), top.get("device", "auto"), ("auto",) + knobs.DEVICES,
                                        "device"), "auto")
    fixed_raw = c.attempt(lambda: c.mapping(("fixed",), section("fixed")), {})
    space_raw = c.attempt(lambda: c.mapping(("space",), section("space")), {})

    refuse_loop_knobs(c, top, fixed_raw, space_raw)
    broken = len(c.found)
    fixed: dict[str, Any] = {}
    for key, value in fixed_raw.items():
        if key == "device":
            c.note(c.fail(("fixed", "device"), "set the device with the top-level `device:` key or sweep it in "
                          "`space:`", show_value=False))
            continue
        if isinstance(value, (list, dict)):  # a knob's rule would say "got a list": say where lists go
            c.note(c.fail(("fixed", key), f"a fixed value is one value; to try several, list {key} under space",
                          value))
            continue
        fixed[key] = c.attempt(lambda: check_value(c, ("fixed", key), key, value), None)
    space: dict[str, Dimension] = {}
    for key, value in space_raw.items():
        if key in fixed_raw:
            c.note(c.fail(("space", key), f"{key} is also in fixed (line {lines.get(('fixed', key))}); "
                          "a parameter is either fixed or swept", show_value=False))
            continue
        space[key] = c.attempt(lambda: check_dimension(c, ("space", key), key, value), None)  # type: ignore[assignment]  # None where it broke a rule: left out below, refused by raise_found
    parameters_ok = len(c.found) == broken
    if parameters_ok:
        c.attempt(lambda: check_space_size(c, space), None)
    c.attempt(lambda: _check_device_key(c, top, lines), None)

    objective = c.attempt(lambda: check_objective(c, section("objective")), None)
    valid_space = {k: v for k, v in space.items() if v is not None}
    search = c.attempt(lambda: check_search(c, section("search"), valid_space, (*space_raw, *fixed_raw)), None)
    if search is not None and objective is not None and search.patience is not None and len(objective.metrics) > 1:
        c.note(c.fail(("search", "patience"), "patience needs a single objective metric (a Pareto front "
                      "has no single best to improve on)", show_value=False))
    trial = c.attempt(lambda: check_trial(c, section("trial")), None)
    script: str | None = None
    script_file: Path | None = None
    args: tuple[str, ...] = ()
    per_step: str | float | None = None
    if parameters_ok:
        c.attempt(lambda: check_combinations(c, fixed, space), None)
        script, script_file, args, per_step = c.attempt(
            lambda: check_script(c, top, fixed, space, path.parent), (None, None, (), None))

    storage = c.attempt(lambda: check_url(c, ("storage",), top.get("storage", DEFAULT_STORAGE), "storage"), None)
    tracking = c.attempt(lambda: check_url(c, ("tracking_uri",), top.get("tracking_uri", DEFAULT_TRACKING_URI),
                                           "tracking_uri"), None)
    devices = c.attempt(lambda: check_devices(c, top.get("devices")), None)
    c.raise_found()
    # every check passed (raise_found raised otherwise): none of these is its fallback
    assert name is not None and objective is not None and search is not None and trial is not None
    assert storage is not None and tracking is not None
    return SweepSpec(path=path, name=name, experiment=experiment, device=device, fixed=fixed,
                     space=space, objective=objective, search=search, trial=trial, storage=storage,
                     tracking_uri=tracking, devices=devices, script=script,
                     args=args, samples_per_step=per_step, script_file=script_file, lines=lines,
                     flags=dict(flag_of or {}))


def _check_name(c: Checker, top: dict[str, Any]) -> str:
    if "name" not in top:
        raise c.fail((), "missing required key name", show_value=False)
    name = top["name"]
    if isinstance(name, str) and len(name) > NAME_MAX and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise c.fail(("name",), f"the study name must be at most {NAME_MAX} characters, got {len(name)}",
                     show_value=False)
    if not isinstance(name, str):
        raise c.fail(("name",), "the study name must be text (quote it: name: '5')", name)
    if not re.fullmatch(NAME_PATTERN, name):
        raise c.fail(("name",), "the study name must be letters, digits, '_', '.' or '-', the first a letter "
                     "or a digit", name)
    return name


def _check_workload(c: Checker, top: dict[str, Any]) -> None:
    """An experiment module, unless the spec names a script (``check_script``'s rules)."""
    if "script" in top:
        return
    if "experiment" not in top:
        raise c.fail((), "missing required key experiment (a module such as experiments.bert) or script "
                     "(a training script such as train.py)", show_value=False)
    experiment = top["experiment"]
    if not isinstance(experiment, str) or not re.fullmatch(EXPERIMENT_PATTERN, experiment):
        dotted = experiment.removesuffix(".py").replace("/", ".") if isinstance(experiment, str) else ""
        did = f" (did you mean {dotted}?)" if re.fullmatch(EXPERIMENT_PATTERN, dotted) else ""  # a file's path (a tour)
        raise c.fail(("experiment",), f"experiment must be a dotted Python module name such as experiments.bert{did}",
                     experiment)


def _check_device_key(c: Checker, top: dict[str, Any], lines: dict[tuple, int]) -> None:
    space = top.get("space")
    if not (isinstance(space, dict) and "device" in space and "device" in top):
        return
    if ("device",) in c.overrides:
        raise c.fail(("device",), f"cannot override the device: space.device sweeps it "
                     f"(line {lines.get(('space', 'device'))})", top["device"])
    raise c.fail(("device",), "device is swept in space; remove the top-level device key", show_value=False)
