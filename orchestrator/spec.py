"""The sweep spec: load a YAML file, check every rule, and return a frozen ``SweepSpec``.

Every error names the file, the line, the field path, the rule and the value received, e.g.
``sweeps/x.yaml:12: space.batch_size[2]: batch sizes must be positive integers, got -8``.
Nothing here touches the disk besides reading the spec.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator import knobs
from orchestrator.dominance import DEFAULT_ORDER
from orchestrator.errors import SpecError
from orchestrator.metrics import OBJECTIVE_METRICS
from orchestrator.yamlsource import dotted, load_yaml

Sampler = Literal["grid", "random", "tpe", "nsga2"]
Direction = Literal["maximize", "minimize"]
SAMPLERS = ("grid", "random", "tpe", "nsga2")
DIRECTIONS = ("maximize", "minimize")
DEFAULT_STORAGE = "sqlite:///mlruns/optuna.db"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"
MAX_TRIAL_REPEATS = 20
MAX_CONFIGURATIONS = 100_000
"""The most configurations a finite space (lists and stepped ranges) may hold, and the most values a
range may list: more is a mistake (a grid over it would not end, and listing it would take more
memory than any sweep), refused when the spec is loaded."""


@dataclass(frozen=True)
class Choice:
    """A categorical dimension: one of the listed values."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Range:
    """A numeric dimension; both bounds inclusive, as in Optuna."""

    low: float
    high: float
    step: float | None = None
    log: bool = False
    integer: bool = False

    def grid_values(self) -> tuple[Any, ...]:
        """The values a grid visits, both bounds included; needs a step (the validator makes
        ``high - low`` a multiple of it)."""
        assert self.step is not None
        if self.integer:
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step)))
        n = round((self.high - self.low) / self.step)
        return tuple(round(self.low + i * self.step, 12) for i in range(n)) + (self.high,)


Dimension = Choice | Range


@dataclass(frozen=True)
class Constraint:
    metric: str
    max: float | None = None
    min: float | None = None

    def violation(self, value: float) -> float:
        """Optuna's convention: <= 0 is feasible, the amount over the bound otherwise."""
        if self.max is not None:
            return value - self.max
        assert self.min is not None
        return self.min - value


@dataclass(frozen=True)
class Objective:
    metrics: tuple[tuple[str, Direction], ...]
    """(metric, direction) pairs; more than one makes a multi-objective study."""
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class SearchSettings:
    sampler: Sampler = "tpe"
    n_trials: int | None = None
    """Finished trials the study should hold, across resumes; None = every configuration."""
    seed: int | None = None
    max_failures: int = 10
    """Failures other than out-of-memory tolerated in one invocation before it stops (exit 3)."""
    timeout_min: float | None = None
    patience: int | None = None
    skip_predicted_oom: bool = True
    allow_swap: bool = False
    """A trial that swapped during its timed window is recorded ``swapped`` (infeasible, a memory
    boundary) unless this is true."""
    grace_period_s: float = 60.0
    """With a server database shared by several orchestrators: a running trial whose orchestrator
    has not sent a heartbeat for this long is failed and its configuration run again."""
    """Skip (record as ``skipped``) configurations that need at least as much memory as one that
    ran out of memory, by ``memory_order``."""
    memory_order: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ORDER))
    """Parameter -> how memory grows with it; merged over ``dominance.DEFAULT_ORDER``."""


@dataclass(frozen=True)
class TrialSettings:
    warmup_steps: int = 3
    measure_steps: int = 10
    min_measure_s: float = 1.0
    """The timed window also lasts at least this long (more steps are run if needed)."""
    timeout_s: float = 900.0
    """Per process: with repeats, each repeat has this long."""
    repeats: int = 1
    """Processes per configuration; the recorded metrics are their median (memory: the largest)."""


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    name: str
    experiment: str
    device: str
    fixed: dict[str, Any]
    space: dict[str, Dimension]
    objective: Objective
    search: SearchSettings
    trial: TrialSettings
    storage: str
    tracking_uri: str
    devices: tuple[str, ...] | None = None
    """Device slots, one trial in flight on each (``orchestrator.slots``); None = one slot."""
    lines: dict[tuple, int] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, *path: Any) -> int | None:
        return self.lines.get(tuple(path))

    def error(self, path: tuple, rule: str) -> SpecError:
        """A rule broken by ``path``, found after loading (by the experiment probe, say)."""
        return SpecError(rule, file=str(self.path), line=_line_of(self.lines, path),
                         field=dotted(path) or None)


def _line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of ``path``, else of its nearest parent that has one."""
    while True:
        line = lines.get(path)
        if line is not None or not path:
            return line
        path = path[:-1]


TOP_KEYS = ("name", "experiment", "device", "devices", "fixed", "space", "objective", "search", "trial",
            "storage", "tracking_uri")
REQUIRED_TOP = ("name", "experiment")


def show(value: Any, spelled: str | None = None) -> str:
    """A value as the user wrote it in YAML; ``spelled`` is the text of a boolean or null
    written another way (``yes``, ``off``, ``~``)."""
    if isinstance(value, bool):
        word = "true" if value else "false"
        return f"{spelled} (YAML reads it as {word})" if spelled and spelled != word else word
    if value is None:
        return "nothing (an empty value)" if not spelled or spelled == "null" else f"{spelled} (null)"
    if isinstance(value, str):
        if _NUMBER.fullmatch(value.strip()):
            if "e" in value.lower():
                return f"'{value}' (text, not a number: YAML reads only forms like 1.0e+3 as numbers)"
            return f"'{value}' (text, not a number: remove the quotes)"
        return f"'{value}'"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return str(value)


_NUMBER = re.compile(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?")


class _Checker:
    """Raises ``SpecError`` with file and line for a field path."""

    def __init__(self, file: str, lines: dict[tuple, int], overrides: dict[tuple, str],
                 spelled: dict[tuple, str] | None = None) -> None:
        self.file, self.lines, self.overrides = file, lines, overrides
        self.spelled = spelled or {}

    def fail(self, path: tuple, rule: str, value: Any = ..., *, show_value: bool = True) -> SpecError:
        if show_value and value is not ...:
            rule = f"{rule}, got {show(value, None if path in self.overrides else self.spelled.get(path))}"
        field_name = dotted(path) or None
        if path in self.overrides:  # the value came from a flag: name the flag, not a line
            return SpecError(rule, file=self.overrides[path], field=field_name)
        return SpecError(rule, file=self.file, line=_line_of(self.lines, path), field=field_name)

    def mapping(self, path: tuple, value: Any, allowed: tuple[str, ...] | None = None,
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        """``value`` as a mapping whose keys are among ``allowed`` (None: any name)."""
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping of keys to values" if path
                            else "the top level must be a mapping of keys to values", value)
        for key in value:
            if allowed is not None and key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                did = f"did you mean {hint[0]!r}? " if hint else ""
                raise self.fail(path + (key,), f"unknown key; {did}valid keys are {', '.join(allowed)}",
                                show_value=False)
        for key in required:
            if key not in value:
                where = dotted(path) + "." if path else ""
                raise self.fail(path, f"missing required key {where}{key}", show_value=False)
        return value

    def integer(self, path: tuple, value: Any, minimum: int, what: str) -> int:
        if not knobs.is_int(value) or value < minimum:
            rule = f"{what} must be a positive integer" if minimum == 1 else f"{what} must be an integer >= {minimum}"
            raise self.fail(path, rule, value)
        return value

    def number(self, path: tuple, value: Any, what: str, *, positive: bool = False,
               nonneg: bool = False) -> float:
        if not knobs.is_number(value) or (positive and value <= 0) or (nonneg and value < 0):
            kind = "a positive number" if positive else "a number >= 0" if nonneg else "a number"
            raise self.fail(path, f"{what} must be {kind}", value)
        return float(value)

    def one_of(self, path: tuple, value: Any, options: tuple[str, ...], what: str) -> str:
        if value not in options:
            hint = difflib.get_close_matches(str(value), options, n=1, cutoff=0.6)
            did = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise self.fail(path, f"{what} must be one of {', '.join(options)}{did}", value)
        return value


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


def check_spec(data: Any, path: Path, lines: dict[tuple, int],
               flag_of: dict[tuple, str] | None = None,
               spelled: dict[tuple, str] | None = None) -> SweepSpec:
    c = _Checker(str(path), lines, flag_of or {}, spelled)
    top = c.mapping((), data, TOP_KEYS, REQUIRED_TOP)

    def section(key: str) -> Any:
        """A section's mapping; an empty one (every entry commented out) counts as absent."""
        value = top.get(key)
        return {} if value is None else value

    name = top["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise c.fail(("name",), "the study name must be letters, digits, '_', '.' or '-'", name)
    experiment = top["experiment"]
    if not isinstance(experiment, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", experiment):
        raise c.fail(("experiment",), "experiment must be a dotted Python module name such as experiments.bert", experiment)

    device = top.get("device", "auto")
    c.one_of(("device",), device, ("auto",) + knobs.DEVICES, "device")

    fixed_raw = c.mapping(("fixed",), section("fixed"))
    space_raw = c.mapping(("space",), section("space"))

    fixed: dict[str, Any] = {}
    for key, value in fixed_raw.items():
        if key == "device":
            raise c.fail(("fixed", "device"), "set the device with the top-level `device:` key or sweep it in `space:`", show_value=False)
        fixed[key] = _check_value(c, ("fixed", key), key, value)
    space: dict[str, Dimension] = {}
    for key, value in space_raw.items():
        if key in fixed:
            raise c.fail(("space", key), f"{key} is also in fixed (line {lines.get(('fixed', key))}); "
                         "a parameter is either fixed or swept", show_value=False)
        space[key] = _check_dimension(c, ("space", key), key, value)
    _check_space_size(c, space)
    if "device" in space and "device" in top:
        if ("device",) in c.overrides:
            raise c.fail(("device",), f"cannot override the device: space.device sweeps it "
                         f"(line {lines.get(('space', 'device'))})", top["device"])
        raise c.fail(("device",), "device is swept in space; remove the top-level device key", show_value=False)

    objective = _check_objective(c, section("objective"))
    search = _check_search(c, section("search"), space)
    if search.patience is not None and len(objective.metrics) > 1:
        raise c.fail(("search", "patience"), "patience needs a single objective metric (a Pareto front "
                     "has no single best to improve on)", show_value=False)
    trial = _check_trial(c, section("trial"))
    _check_combinations(c, fixed, space)

    storage = _check_url(c, ("storage",), top.get("storage", DEFAULT_STORAGE), "storage")
    tracking = _check_url(c, ("tracking_uri",), top.get("tracking_uri", DEFAULT_TRACKING_URI), "tracking_uri")
    return SweepSpec(path=path, name=name, experiment=experiment, device=device, fixed=fixed,
                     space=space, objective=objective, search=search, trial=trial, storage=storage,
                     tracking_uri=tracking, devices=_check_devices(c, top.get("devices")), lines=lines)


def _check_value(c: _Checker, path: tuple, name: str, value: Any) -> Any:
    """Check one fixed value or choice; return it as the trial receives it (a float knob given
    an int gets the float)."""
    knob = knobs.KNOBS.get(name)
    if knob is not None:
        rule = knob.check(float(value) if knob.kind == "float" and knobs.is_int(value) else value)
        if rule:
            raise c.fail(path, rule, value)
        return float(value) if knob.kind == "float" else value
    if isinstance(value, float) and not knobs.is_number(value):
        raise c.fail(path, "experiment parameters must be finite numbers", value)
    if not isinstance(value, (str, int, float, bool)):
        raise c.fail(path, "experiment parameters must be a string, number or boolean", value)
    return value


def _same_key(value: Any) -> Any:
    """Values a trial cannot tell apart compare equal (1 and 1.0; not true and 1)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    return (type(value).__name__, value)


def _check_dimension(c: _Checker, path: tuple, name: str, value: Any) -> Dimension:
    if isinstance(value, list):
        if not value:
            raise c.fail(path, "a list of choices must not be empty", show_value=False)
        values = []
        seen: set[Any] = set()
        for i, item in enumerate(value):
            if name == "device" and item == "auto":
                raise c.fail(path + (i,), "a swept device must be mps, cuda or cpu", item)
            values.append(_check_value(c, path + (i,), name, item))
            if _same_key(item) in seen:
                raise c.fail(path + (i,), "choices must not repeat", item)
            seen.add(_same_key(item))
        return Choice(tuple(values))
    if not isinstance(value, dict):
        raise c.fail(path, "a space entry is a list of choices or a range {low, high, step, log} "
                     "(a single value belongs in fixed)", value)
    c.mapping(path, value, ("low", "high", "step", "log"), ("low", "high"))
    knob = knobs.KNOBS.get(name)
    if knob is not None and knob.kind not in ("int", "float"):
        raise c.fail(path, f"{name} takes a list of choices, not a range", show_value=False)
    low, high = value["low"], value["high"]
    for bound, v in (("low", low), ("high", high)):
        if not knobs.is_number(v):
            raise c.fail(path + (bound,), "range bounds must be numbers", v)
    step = value.get("step")
    # An experiment's own parameter is an integer range when all its numbers are integers.
    integer = (knobs.is_int(low) and knobs.is_int(high) and (step is None or knobs.is_int(step))
               if knob is None else knob.kind == "int")
    if integer:
        for bound, v in (("low", low), ("high", high)):
            if not knobs.is_int(v):
                raise c.fail(path + (bound,), f"{name} ranges need integer bounds", v)
    for bound, v in (("low", low), ("high", high)):
        _check_value(c, path + (bound,), name, v)
    if low > high:
        raise c.fail(path, f"low must not exceed high (bounds are inclusive), got low {low} > high {high}",
                     show_value=False)
    log = value.get("log", False)
    if not isinstance(log, bool):
        raise c.fail(path + ("log",), "log must be true or false", log)
    if log and low <= 0:
        raise c.fail(path + ("low",), "log: true needs low > 0", low)
    if step is not None:
        if not knobs.is_number(step) or step <= 0:
            raise c.fail(path + ("step",), "step must be a positive number", step)
        if integer and not knobs.is_int(step):
            raise c.fail(path + ("step",), "step of an integer range must be an integer", step)
        if log:
            raise c.fail(path + ("step",), "step and log: true cannot be combined (as in Optuna)", step)
        n = (high - low) / step
        if not math.isfinite(n) or n + 1 > MAX_CONFIGURATIONS:
            raise c.fail(path + ("step",), f"this range lists {n + 1:,.0f} values, more than a sweep can visit "
                         f"(at most {MAX_CONFIGURATIONS:,}); give a larger step, or no step for a range "
                         f"that is sampled", step)
        if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
            raise c.fail(path + ("step",), f"high - low must be a multiple of step so that both "
                         f"bounds are visited (low {low}, high {high})", step)
    if integer:
        return Range(low=low, high=high, step=step, log=log, integer=True)
    return Range(low=float(low), high=float(high), step=None if step is None else float(step), log=log)


def _check_objective(c: _Checker, raw: Any) -> Objective:
    path = ("objective",)
    obj = c.mapping(path, raw, ("metric", "direction", "metrics", "constraints"))
    metrics: list[tuple[str, Direction]] = []
    if "metrics" in obj:
        if "metric" in obj or "direction" in obj:
            raise c.fail(path, "give either metric + direction or metrics, not both", show_value=False)
        many = c.mapping(path + ("metrics",), obj["metrics"], OBJECTIVE_METRICS)
        if not many:
            raise c.fail(path + ("metrics",), "name at least one metric", show_value=False)
        for metric, direction in many.items():
            c.one_of(path + ("metrics", metric), direction, DIRECTIONS, "direction")
            metrics.append((metric, direction))
    else:
        metric = obj.get("metric", "samples_per_s")
        c.one_of(path + ("metric",), metric, OBJECTIVE_METRICS, "objective metric")
        direction = obj.get("direction", "maximize")
        c.one_of(path + ("direction",), direction, DIRECTIONS, "direction")
        metrics.append((metric, direction))
    constraints = []
    raw_c = obj.get("constraints") or {}
    c.mapping(path + ("constraints",), raw_c, OBJECTIVE_METRICS)
    for metric, bound in raw_c.items():
        b = c.mapping(path + ("constraints", metric), bound, ("max", "min"))
        if len(b) != 1:
            raise c.fail(path + ("constraints", metric), "give exactly one of max or min", show_value=False)
        (kind, limit), = b.items()
        c.number(path + ("constraints", metric, kind), limit, f"the {kind} bound")
        constraints.append(Constraint(metric, **{kind: float(limit)}))
    return Objective(tuple(metrics), tuple(constraints))


def _check_search(c: _Checker, raw: Any, space: dict[str, Dimension]) -> SearchSettings:
    path = ("search",)
    s = c.mapping(path, raw, ("sampler", "n_trials", "seed", "max_failures", "timeout_min", "patience",
                              "skip_predicted_oom", "memory_order", "allow_swap", "grace_period_s"))
    sampler = c.one_of(path + ("sampler",), s.get("sampler", "tpe"), SAMPLERS, "sampler")
    n_trials = s.get("n_trials")
    if n_trials is not None:
        c.integer(path + ("n_trials",), n_trials, 1, "n_trials")
    seed = s.get("seed")
    if seed is not None:
        c.integer(path + ("seed",), seed, 0, "seed")
    max_failures = c.integer(path + ("max_failures",), s.get("max_failures", 10), 0, "max_failures")
    timeout_min = s.get("timeout_min")
    if timeout_min is not None:
        c.number(path + ("timeout_min",), timeout_min, "timeout_min", positive=True)
    patience = s.get("patience")
    if patience is not None:
        c.integer(path + ("patience",), patience, 1, "patience")
    if sampler == "grid":
        for name, dim in space.items():
            if isinstance(dim, Range) and dim.step is None:
                raise c.fail(("space", name), "grid sampling over a range needs a step",
                             show_value=False)
    continuous = [n for n, d in space.items() if isinstance(d, Range) and d.step is None]
    if n_trials is None and continuous:
        raise c.fail(("space", continuous[0]), "a range without a step is continuous: set "
                     "search.n_trials (how many trials to run) or give the range a step", show_value=False)
    skip = s.get("skip_predicted_oom", True)
    if not isinstance(skip, bool):
        raise c.fail(path + ("skip_predicted_oom",), "skip_predicted_oom must be true or false", skip)
    allow_swap = s.get("allow_swap", False)
    if not isinstance(allow_swap, bool):
        raise c.fail(path + ("allow_swap",), "allow_swap must be true or false", allow_swap)
    grace = c.number(path + ("grace_period_s",), s.get("grace_period_s", 60.0), "grace_period_s", positive=True)
    if grace < 2:
        raise c.fail(path + ("grace_period_s",), "grace_period_s must be at least 2 (heartbeats are "
                     "sent every grace_period_s / 4, at least once a second)", grace)
    return SearchSettings(sampler=sampler, n_trials=n_trials, seed=seed, max_failures=max_failures,
                          timeout_min=timeout_min, patience=patience, skip_predicted_oom=skip,
                          allow_swap=allow_swap, grace_period_s=grace,
                          memory_order=_check_memory_order(c, s.get("memory_order") or {}, space))


def _check_memory_order(c: _Checker, raw: Any, space: dict[str, Dimension]) -> dict[str, Any]:
    from orchestrator.dominance import DEFAULT_ORDER, ORDER_WORDS

    path = ("search", "memory_order")
    c.mapping(path, raw, tuple(raw) if isinstance(raw, dict) else ())
    order: dict[str, Any] = dict(DEFAULT_ORDER)
    for name, rule in raw.items():
        where = path + (name,)
        if isinstance(rule, dict):
            for value, rank in rule.items():
                if not knobs.is_number(rank):
                    raise c.fail(where + (value,), "memory ranks must be numbers (higher = more memory)", rank)
            dim = space.get(name)
            if isinstance(dim, Choice):
                missing = [v for v in dim.values if v not in rule]
                if missing:
                    raise c.fail(where, f"give a rank to every choice of space.{name}; missing "
                                 f"{', '.join(map(show, missing))}", show_value=False)
        elif rule not in ORDER_WORDS:
            raise c.fail(where, f"a memory order is {', '.join(ORDER_WORDS)} or a mapping of value to rank", rule)
        order[name] = rule
    return order


DEVICE_SLOT = re.compile(r"(cuda(:\d+)?|mps|cpu(:\d+(-\d+)?)?)")


def _check_devices(c: _Checker, raw: Any) -> tuple[str, ...] | None:
    """``auto``, or device slots as a list or a comma-separated text: ``cuda:0``, ``cuda`` (every
    visible GPU), ``mps``, ``cpu`` (all cores) or ``cpu:0-3`` (a trial pinned to cores 0-3)."""
    if raw is None:
        return None
    path = ("devices",)
    rule = ("devices must be auto or a list of cuda:N, cuda, mps, cpu or cpu:A-B (cores A to B), "
            "e.g. cuda:0,cuda:1")
    if isinstance(raw, str):
        items = [x.strip() for x in raw.split(",")]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise c.fail(path, rule, raw)
    for i, item in enumerate(items):
        where = path + (i,) if isinstance(raw, list) else path
        if not isinstance(item, str) or not (item == "auto" and len(items) == 1 or DEVICE_SLOT.fullmatch(item)):
            raise c.fail(where, rule, item)
        m = re.fullmatch(r"cpu:(\d+)-(\d+)", item)
        if m and int(m.group(1)) > int(m.group(2)):
            raise c.fail(where, "a core range A-B needs A <= B", item)
    if len(set(items)) != len(items):
        raise c.fail(path, "a device slot is listed twice (one trial per device at a time)", raw)
    return tuple(items)


def _check_trial(c: _Checker, raw: Any) -> TrialSettings:
    path = ("trial",)
    t = c.mapping(path, raw, ("warmup_steps", "measure_steps", "min_measure_s", "timeout_s", "repeats"))
    d = TrialSettings()
    repeats = c.integer(path + ("repeats",), t.get("repeats", d.repeats), 1, "repeats")
    if repeats > MAX_TRIAL_REPEATS:
        raise c.fail(path + ("repeats",), f"repeats must be at most {MAX_TRIAL_REPEATS} (each repeat is a "
                     "whole training process)", repeats)
    return TrialSettings(
        repeats=repeats,
        warmup_steps=c.integer(path + ("warmup_steps",), t.get("warmup_steps", d.warmup_steps), 1, "warmup_steps"),
        measure_steps=c.integer(path + ("measure_steps",), t.get("measure_steps", d.measure_steps), 1, "measure_steps"),
        min_measure_s=c.number(path + ("min_measure_s",), t.get("min_measure_s", d.min_measure_s), "min_measure_s", nonneg=True),
        timeout_s=c.number(path + ("timeout_s",), t.get("timeout_s", d.timeout_s), "timeout_s", positive=True),
    )


def _values(fixed: dict[str, Any], space: dict[str, Dimension], name: str,
            ends: bool = False) -> tuple[tuple, tuple[Any, ...]] | None:
    """The values a parameter can take, with its path; None if absent or (unless ``ends``: then
    its bounds stand for it) a continuous range."""
    if name in fixed:
        return ("fixed", name), (fixed[name],)
    dim = space.get(name)
    if isinstance(dim, Choice):
        return ("space", name), dim.values
    if isinstance(dim, Range) and dim.integer:
        if (int(dim.high) - int(dim.low)) // int(dim.step or 1) + 1 > MAX_CONFIGURATIONS:
            return ("space", name), None  # too many to list: the caller says so
        return ("space", name), tuple(range(int(dim.low), int(dim.high) + 1, int(dim.step or 1)))
    if isinstance(dim, Range) and ends:
        return ("space", name), (dim.low, dim.high)
    return None


def _count(dim: Dimension) -> int | None:
    """How many values a dimension lists (a grid visits): None for a range without a step,
    which is sampled."""
    if isinstance(dim, Choice):
        return len(dim.values)
    return None if dim.step is None else round((dim.high - dim.low) / dim.step) + 1


def _check_space_size(c: _Checker, space: dict[str, Dimension]) -> None:
    """A finite space of more than ``MAX_CONFIGURATIONS`` is refused at the line of its largest
    dimension (the product is computed from the sizes, never listed)."""
    sizes = {name: _count(dim) for name, dim in space.items()}
    if not sizes or any(n is None for n in sizes.values()):
        return  # a continuous dimension: sampled, never listed
    total = math.prod(sizes.values())
    if total > MAX_CONFIGURATIONS:
        largest = max(sizes, key=lambda k: sizes[k])
        raise c.fail(("space", largest), f"the space holds {total:,} configurations ("
                     + " x ".join(f"{k} {n:,}" for k, n in sizes.items()) + f"), more than a sweep can "
                     f"visit (at most {MAX_CONFIGURATIONS:,}); list fewer values, or give a range "
                     "without a step so that it is sampled", show_value=False)


def _item(where: tuple, values: tuple[Any, ...], value: Any, space: dict[str, Dimension]) -> tuple:
    """The path of ``value`` inside a list of choices (so the message points at its line)."""
    if where[0] == "space" and isinstance(space.get(where[1]), Choice):
        return where + (values.index(value),)
    return where


def _check_combinations(c: _Checker, fixed: dict[str, Any], space: dict[str, Dimension]) -> None:
    """Rules that involve two parameters, checked over every combination the space holds."""
    eff = _values(fixed, space, "effective_batch_size")
    if eff is not None or "effective_batch_size" in space:
        if "grad_accum_steps" in fixed or "grad_accum_steps" in space:
            where = ("fixed" if "grad_accum_steps" in fixed else "space", "grad_accum_steps")
            raise c.fail(where, "grad_accum_steps is derived from effective_batch_size / batch_size; "
                         "give one or the other, not both", show_value=False)
        bs = _values(fixed, space, "batch_size")
        if bs is None or eff is None:
            raise c.fail(("space", "effective_batch_size") if "effective_batch_size" in space else ("fixed", "effective_batch_size"),
                         "effective_batch_size needs batch_size as a fixed value or a list of choices", show_value=False)
        for where, values in (bs, eff):
            if values is None:
                raise c.fail(where, f"every effective_batch_size is checked against every batch size, so this "
                             f"range must list at most {MAX_CONFIGURATIONS:,} values; give a step or a list",
                             show_value=False)
        if len(bs[1]) * len(eff[1]) > MAX_CONFIGURATIONS:
            raise c.fail(eff[0], f"{len(bs[1]):,} batch sizes x {len(eff[1]):,} effective batch sizes are more "
                         f"than {MAX_CONFIGURATIONS:,} combinations to check; give fewer values", show_value=False)
        for b, e in itertools.product(bs[1], eff[1]):
            if e % b:
                raise c.fail(_item(bs[0], bs[1], b, space),
                             f"each batch size must divide effective_batch_size {e}", b)
    high = _values(fixed, space, "mps_high_watermark_ratio", ends=True)
    low = _values(fixed, space, "mps_low_watermark_ratio", ends=True)
    if low is not None:
        for h, lo in itertools.product(high[1] if high else (knobs.MPS_DEFAULT_HIGH_WATERMARK,), low[1]):
            if h != 0.0 and lo > h:
                if high is None:
                    raise c.fail(_item(low[0], low[1], lo, space), "the low watermark must not exceed "
                                 f"MPS's default high one, {h}, when mps_high_watermark_ratio is not given", lo)
                raise c.fail(_item(low[0], low[1], lo, space), "the low watermark must not exceed "
                             f"the high one ({h})", lo)


_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")
_DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary",
                    "mysqldb": "mysqlclient", "pymysql": "PyMySQL"}


def _check_url(c: _Checker, path: tuple, value: Any, what: str) -> str:
    """A URL Optuna (storage) or MLflow (tracking_uri) can open; the connection itself is tried
    at run time, but a missing database driver is caught here, before anything runs."""
    example = DEFAULT_STORAGE if what == "storage" else DEFAULT_TRACKING_URI
    if not isinstance(value, str) or not value.strip():
        raise c.fail(path, f"{what} must be a URL such as {example}", value)
    if what == "tracking_uri":
        if value == "databricks" or re.match(r"^(https?|databricks)://", value):
            return value
        if value.startswith("file:"):
            raise c.fail(path, f"MLflow 3 refuses the file store; use a URL such as {example}", value)
        if not _URL.match(value):
            raise c.fail(path, "MLflow 3 refuses a plain folder as tracking store; "
                         f"use a URL such as {example}", value)
    from sqlalchemy.engine import make_url  # light import; no engine is created here
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except (ArgumentError, ValueError):
        raise c.fail(path, f"{what} must be a database URL such as {example}", value) from None
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql", "mysql", "mssql", "oracle"):
        raise c.fail(path, f"{what} must be a sqlite:///, postgresql:// or mysql:// URL", value)
    if backend == "sqlite" and (not url.database or url.database == ":memory:"):
        raise c.fail(path, f"{what} needs a file path (sqlite:///path/to/file.db); an in-memory "
                     "database would lose the study", value)
    try:
        dialect = url.get_dialect()
    except (ArgumentError, ImportError):
        raise c.fail(path, f"{what} names a database driver SQLAlchemy does not know "
                     f"({url.get_driver_name()})", value) from None
    if backend != "sqlite":
        try:
            dialect.import_dbapi()
        except ImportError:
            driver = url.get_driver_name()
            package = _DRIVER_PACKAGES.get(driver, driver)
            raise c.fail(path, f"{what} needs the {backend} driver {driver}, which is not installed "
                         f"(pip install '{package}')", value) from None
    return value
