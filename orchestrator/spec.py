"""The sweep spec: load a YAML file, check every rule, and return a frozen ``SweepSpec``.

Every error names the file, the line, the field path, the rule and the value received, e.g.
``sweeps/x.yaml:12: space.batch_size[2]: batch sizes must be positive integers, got -8``.
Nothing here touches the disk besides reading the spec.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator import knobs
from orchestrator.errors import SpecError
from orchestrator.metrics import OBJECTIVE_METRICS
from orchestrator.yamlsource import dotted, load_yaml

Sampler = Literal["grid", "random", "tpe", "nsga2"]
Direction = Literal["maximize", "minimize"]
SAMPLERS = ("grid", "random", "tpe", "nsga2")
DIRECTIONS = ("maximize", "minimize")
DEFAULT_STORAGE = "sqlite:///mlruns/optuna.db"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"


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
        """The values a grid visits; needs a step."""
        assert self.step is not None
        if self.integer:
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step)))
        n = int((self.high - self.low) / self.step + 1e-9)
        return tuple(round(self.low + i * self.step, 12) for i in range(n + 1))


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


@dataclass(frozen=True)
class TrialSettings:
    warmup_steps: int = 3
    measure_steps: int = 10
    min_measure_s: float = 1.0
    """The timed window also lasts at least this long (more steps are run if needed)."""
    timeout_s: float = 900.0


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
    lines: dict[tuple, int] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, *path: Any) -> int | None:
        return self.lines.get(tuple(path))

    def error(self, path: tuple, rule: str) -> SpecError:
        return SpecError(rule, file=str(self.path), line=self.lines.get(path), field=dotted(path))


TOP_KEYS = ("name", "experiment", "device", "fixed", "space", "objective", "search", "trial",
            "storage", "tracking_uri")
REQUIRED_TOP = ("name", "experiment")


def show(value: Any) -> str:
    """A value as the user wrote it in YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null (empty)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


class _Checker:
    """Raises ``SpecError`` with file and line for a field path."""

    def __init__(self, file: str, lines: dict[tuple, int], overrides: dict[tuple, str]) -> None:
        self.file, self.lines, self.overrides = file, lines, overrides

    def fail(self, path: tuple, rule: str, value: Any = ..., *, show_value: bool = True) -> SpecError:
        text = f"{rule}, got {show(value)}" if show_value and value is not ... else rule
        field_name = dotted(path) or None
        if path in self.overrides:
            return SpecError(text, file=self.overrides[path], field=field_name)
        line = self.lines.get(path)
        probe = path
        while line is None and probe:
            probe = probe[:-1]
            line = self.lines.get(probe)
        return SpecError(text, file=self.file, line=line, field=field_name)

    def mapping(self, path: tuple, value: Any, allowed: tuple[str, ...],
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping of keys to values" if path
                            else "the top level must be a mapping of keys to values", value)
        for key in value:
            if key not in allowed:
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
    data, lines = load_yaml(path)
    flag_of: dict[tuple, str] = {}
    for flag, (field_path, value) in (overrides or {}).items():
        node = data
        for part in field_path[:-1]:
            if isinstance(node, dict) and part not in node:
                node[part] = {}
            node = node.get(part) if isinstance(node, dict) else None
        if value is not None and isinstance(node, dict):  # else check_spec reports the bad node
            node[field_path[-1]] = value
            flag_of[tuple(field_path)] = flag
    return check_spec(data, path, lines, flag_of)


def check_spec(data: Any, path: Path, lines: dict[tuple, int],
               flag_of: dict[tuple, str] | None = None) -> SweepSpec:
    c = _Checker(str(path), lines, flag_of or {})
    top = c.mapping((), data, TOP_KEYS, REQUIRED_TOP)

    name = top["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise c.fail(("name",), "the study name must be letters, digits, '_', '.' or '-'", name)
    experiment = top["experiment"]
    if not isinstance(experiment, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", experiment):
        raise c.fail(("experiment",), "experiment must be a dotted Python module name such as experiments.bert", experiment)

    device = top.get("device", "auto")
    c.one_of(("device",), device, ("auto",) + knobs.DEVICES, "device")

    fixed = top.get("fixed") or {}
    c.mapping(("fixed",), fixed, tuple(fixed) if isinstance(fixed, dict) else ())
    space_raw = top.get("space") or {}
    c.mapping(("space",), space_raw, tuple(space_raw) if isinstance(space_raw, dict) else ())

    for key, value in fixed.items():
        if key == "device":
            raise c.fail(("fixed", "device"), "set the device with the top-level `device:` key or sweep it in `space:`", show_value=False)
        _check_value(c, ("fixed", key), key, value)
    space: dict[str, Dimension] = {}
    for key, value in space_raw.items():
        if key in fixed:
            raise c.fail(("space", key), f"{key} is also in fixed (line {lines.get(('fixed', key))}); "
                         "a parameter is either fixed or swept", show_value=False)
        space[key] = _check_dimension(c, ("space", key), key, value)
    if "device" in space and "device" in top:
        raise c.fail(("device",), "device is swept in space; remove the top-level device key", show_value=False)

    objective = _check_objective(c, top.get("objective", {"metric": "samples_per_s", "direction": "maximize"}))
    search = _check_search(c, top.get("search", {}), space)
    trial = _check_trial(c, top.get("trial", {}))
    _check_combinations(c, fixed, space)

    storage = _check_url(c, ("storage",), top.get("storage", DEFAULT_STORAGE), "storage")
    tracking = _check_url(c, ("tracking_uri",), top.get("tracking_uri", DEFAULT_TRACKING_URI), "tracking_uri")
    return SweepSpec(path=path, name=name, experiment=experiment, device=device, fixed=dict(fixed),
                     space=space, objective=objective, search=search, trial=trial, storage=storage,
                     tracking_uri=tracking, lines=lines)


def _check_value(c: _Checker, path: tuple, name: str, value: Any) -> None:
    knob = knobs.KNOBS.get(name)
    if knob is not None:
        if knob.kind == "float" and knobs.is_int(value):
            value = float(value)
        rule = knob.check(value)
        if rule:
            raise c.fail(path, rule, value)
    elif not isinstance(value, (str, int, float, bool)) or value is None:
        raise c.fail(path, "experiment parameters must be a string, number or boolean", value)


def _check_dimension(c: _Checker, path: tuple, name: str, value: Any) -> Dimension:
    if isinstance(value, list):
        if not value:
            raise c.fail(path, "a list of choices must not be empty", show_value=False)
        for i, item in enumerate(value):
            if name == "device" and item == "auto":
                raise c.fail(path + (i,), "a swept device must be mps, cuda or cpu", item)
            _check_value(c, path + (i,), name, item)
        if len(set(map(repr, value))) != len(value):
            raise c.fail(path, "choices must not repeat", value, show_value=False)
        return Choice(tuple(value))
    if not isinstance(value, dict):
        raise c.fail(path, "a space entry is a list of choices or a range {low, high, step, log}", value)
    c.mapping(path, value, ("low", "high", "step", "log"), ("low", "high"))
    knob = knobs.KNOBS.get(name)
    if knob is not None and knob.kind not in ("int", "float"):
        raise c.fail(path, f"{name} takes a list of choices, not a range", show_value=False)
    low, high = value["low"], value["high"]
    for bound, v in (("low", low), ("high", high)):
        if not knobs.is_number(v):
            raise c.fail(path + (bound,), "range bounds must be numbers", v)
    integer = knobs.is_int(low) and knobs.is_int(high) and (knob is None or knob.kind == "int")
    if knob is not None and knob.kind == "int" and not integer:
        raise c.fail(path, f"{name} ranges need integer bounds", f"{low}..{high}", show_value=True)
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
    step = value.get("step")
    if step is not None:
        if not knobs.is_number(step) or step <= 0:
            raise c.fail(path + ("step",), "step must be a positive number", step)
        if integer and not knobs.is_int(step):
            raise c.fail(path + ("step",), "step of an integer range must be an integer", step)
        if log:
            raise c.fail(path + ("step",), "step and log: true cannot be combined (as in Optuna)", step)
    return Range(low=low, high=high, step=step, log=log, integer=integer)


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
    s = c.mapping(path, raw, ("sampler", "n_trials", "seed", "max_failures", "timeout_min", "patience"))
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
    finite = all(isinstance(d, Choice) or d.step is not None for d in space.values())
    if n_trials is None and not finite:
        raise c.fail(path, "missing required key search.n_trials (the space has a continuous range)",
                     show_value=False)
    return SearchSettings(sampler=sampler, n_trials=n_trials, seed=seed, max_failures=max_failures,
                          timeout_min=timeout_min, patience=patience)


def _check_trial(c: _Checker, raw: Any) -> TrialSettings:
    path = ("trial",)
    t = c.mapping(path, raw, ("warmup_steps", "measure_steps", "min_measure_s", "timeout_s"))
    d = TrialSettings()
    return TrialSettings(
        warmup_steps=c.integer(path + ("warmup_steps",), t.get("warmup_steps", d.warmup_steps), 1, "warmup_steps"),
        measure_steps=c.integer(path + ("measure_steps",), t.get("measure_steps", d.measure_steps), 1, "measure_steps"),
        min_measure_s=c.number(path + ("min_measure_s",), t.get("min_measure_s", d.min_measure_s), "min_measure_s", nonneg=True),
        timeout_s=c.number(path + ("timeout_s",), t.get("timeout_s", d.timeout_s), "timeout_s", positive=True),
    )


def _values(fixed: dict[str, Any], space: dict[str, Dimension], name: str) -> tuple[tuple, tuple[Any, ...]] | None:
    """The values a parameter can take, with its path; None if absent or continuous."""
    if name in fixed:
        return ("fixed", name), (fixed[name],)
    dim = space.get(name)
    if isinstance(dim, Choice):
        return ("space", name), dim.values
    if isinstance(dim, Range) and dim.integer:
        return ("space", name), tuple(range(int(dim.low), int(dim.high) + 1, int(dim.step or 1)))
    return None


def _check_combinations(c: _Checker, fixed: dict[str, Any], space: dict[str, Dimension]) -> None:
    """Rules that involve two parameters, checked over every combination the space holds."""
    eff = _values(fixed, space, "effective_batch_size")
    if eff is not None or "effective_batch_size" in space:
        if "grad_accum_steps" in fixed or "grad_accum_steps" in space:
            where = ("fixed" if "grad_accum_steps" in fixed else "space", "grad_accum_steps")
            raise c.fail(where, "grad_accum_steps is derived from effective_batch_size / batch_size; "
                         "give one or the other", show_value=False)
        bs = _values(fixed, space, "batch_size")
        if bs is None or eff is None:
            raise c.fail(("space", "effective_batch_size") if "effective_batch_size" in space else ("fixed", "effective_batch_size"),
                         "effective_batch_size needs batch_size as a fixed value or a list of choices", show_value=False)
        for b, e in itertools.product(bs[1], eff[1]):
            if e % b:
                raise c.fail(bs[0], f"effective_batch_size {e} is not a multiple of batch_size {b}; "
                             "remove that batch size or change the effective batch", show_value=False)
    high = _values(fixed, space, "mps_high_watermark_ratio")
    low = _values(fixed, space, "mps_low_watermark_ratio")
    if high is not None and low is not None:
        for h, lo in itertools.product(high[1], low[1]):
            if h != 0.0 and lo > h:
                raise c.fail(low[0], f"the low watermark must not exceed the high one, "
                             f"got low {lo} > high {h}", show_value=False)


_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")


def _check_url(c: _Checker, path: tuple, value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise c.fail(path, f"{what} must be a URL such as {DEFAULT_STORAGE if what == 'storage' else DEFAULT_TRACKING_URI}", value)
    if what == "tracking_uri" and not _URL.match(value):
        raise c.fail(path, "MLflow 3 refuses a plain folder as tracking store; "
                     f"use a URL such as {DEFAULT_TRACKING_URI}", value)
    if what == "tracking_uri" and value.startswith("file:"):
        raise c.fail(path, f"MLflow 3 refuses the file store; use {DEFAULT_TRACKING_URI}", value)
    if what == "tracking_uri" and value.split(":", 1)[0] in ("http", "https", "databricks"):
        return value
    from sqlalchemy.engine import make_url  # light import; no engine is created here
    from sqlalchemy.exc import ArgumentError
    try:
        url = make_url(value)
    except (ArgumentError, ValueError) as exc:
        raise c.fail(path, f"{what} is not a database URL ({exc})", value) from None
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql", "mysql", "mssql", "oracle"):
        raise c.fail(path, f"{what} must be a sqlite://, postgresql:// or mysql:// URL", value)
    if backend == "sqlite" and not url.database:
        raise c.fail(path, f"{what} needs a file path (sqlite:///path/to/file.db); an in-memory "
                     "database would lose the study", value)
    return value
