"""The rules a sweep spec's sections must follow (objective, search, trial, devices, the storage
URLs), and the ``Checker`` through which every rule fails: a ``SpecError`` naming the file, line,
field path, rule and the value received. The rules of the parameters themselves (fixed values,
space entries, their combinations) are in ``orchestrator.spec.space_rules``; ``orchestrator.spec.load``
calls both in order and builds the ``SweepSpec``."""

from __future__ import annotations

import difflib
import importlib.util
import re
from typing import Any, Callable, TypeVar

from orchestrator.spec import knobs
from orchestrator.errors import SpecError, each_error, raise_all
from orchestrator.metrics import OBJECTIVE_METRICS
from orchestrator.spec.model import (DEFAULT_STORAGE, DEFAULT_TRACKING_URI, DIRECTIONS, MAX_TRIAL_REPEATS,
                                    SAMPLERS, STOPS, Choice, Constraint, Dimension, Direction, Objective, Range,
                                    SearchSettings, TrialSettings, nearest_line)
from orchestrator.spec.yamlsource import dotted
from orchestrator.urls import is_sqlite_file


def show(value: object, spelled: str | None = None) -> str:
    """A value as the user wrote it in YAML; ``spelled`` is the text of a boolean or null
    written another way (``yes``, ``off``, ``~``)."""
    if isinstance(value, bool):
        word = "true" if value else "false"
        return f"{spelled} (YAML reads it as {word})" if spelled and spelled != word else word
    if value is None:
        return "nothing (an empty value)" if not spelled or spelled == "null" else f"{spelled} (null)"
    if isinstance(value, str):
        if quoted_number(value):
            if "e" in value.lower():
                return f"'{value}' (text, not a number: YAML reads only forms like 1.0e+3 as numbers)"
            return f"'{value}' (text, not a number: remove the quotes)"
        return repr(value) if "'" in value else f"'{value}'"  # "__import__('os')", not '__import__('os')'
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return str(value)


T = TypeVar("T")
F = TypeVar("F")
_NUMBER = re.compile(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?")


def quoted_number(value: object) -> bool:
    """A string that reads as a number (``'64'``, ``' 1e-3'``): a number the user quoted."""
    return isinstance(value, str) and _NUMBER.fullmatch(value.strip()) is not None


class Checker:
    """Words every broken rule as a ``SpecError`` with file and line for a field path, and keeps
    them: a rule raises (``raise c.fail(...)``) and ``attempt``, around each part of the spec that
    can be checked on its own, notes the error and goes on, so that one read finds every error;
    ``raise_found`` raises them all at the end, in the file's order."""

    def __init__(self, file: str, lines: dict[tuple, int], overrides: dict[tuple, str],
                 spelled: dict[tuple, str] | None = None) -> None:
        self.file, self.lines, self.overrides = file, lines, overrides
        self.spelled = spelled or {}
        self.found: list[SpecError] = []
        self.whole: set[str] = set()
        """Fields refused as a whole (``refuse_whole``)."""

    def note(self, error: SpecError) -> None:
        """A broken rule, kept; checking goes on."""
        self.found += each_error(error)

    def attempt(self, check: Callable[[], T], fallback: F) -> T | F:
        """``check()``, or ``fallback`` where it breaks a rule (the error is kept)."""
        try:
            return check()
        except SpecError as exc:
            self.note(exc)
            return fallback

    def refuse_whole(self, error: SpecError) -> None:
        """``note`` an error that refuses a field as a whole (a name a script spec may not use):
        what its value breaks besides is left unsaid (``space.compile[0]``'s type, once the line
        says to rename ``space.compile``)."""
        self.note(error)
        if error.field:
            self.whole.add(error.field)

    def raise_found(self) -> None:
        """Every kept error at once (``errors.raise_all``); nothing if none."""
        raise_all([e for e in self.found if not e.field or not any(
            e.field.startswith((f + ".", f + "[")) for f in self.whole)])

    def fail(self, path: tuple, rule: str, value: object = ..., *, show_value: bool = True) -> SpecError:
        if show_value and value is not ...:
            rule = f"{rule}, got {show(value, None if path in self.overrides else self.spelled.get(path))}"
        field_name = dotted(path) or None
        if path in self.overrides:  # the value came from a flag: name the flag, not a line
            return SpecError(rule, file=self.overrides[path], field=field_name)
        return SpecError(rule, file=self.file, line=nearest_line(self.lines, path), field=field_name)

    def mapping(self, path: tuple, value: object, allowed: tuple[str, ...] | None = None,
                required: tuple[str, ...] = ()) -> dict[str, Any]:
        """``value`` as a mapping whose keys are among ``allowed`` (None: any name): an unknown key
        is noted and left out of the mapping returned; a missing required key raises."""
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping of keys to values" if path
                            else "the top level must be a mapping of keys to values", value)
        misspelled: dict[str, SpecError] = {}
        for key in value:  # each unknown key is noted; the known ones are still checked
            if allowed is not None and key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                did = f"did you mean {hint[0]!r}? " if hint else ""
                error = self.fail(path + (key,), f"unknown key; {did}valid keys are {', '.join(allowed)}",
                                  show_value=False)
                self.note(error)
                if hint:
                    misspelled[hint[0]] = error
        for key in required:
            if key not in value:
                where = dotted(path) + "." if path else ""
                # a required key spelled wrong is said once, by its unknown key's line
                raise misspelled.get(key) or self.fail(path, f"missing required key {where}{key}", show_value=False)
        return value if allowed is None else {k: v for k, v in value.items() if k in allowed}

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

    def one_of(self, path: tuple, value: object, options: tuple[str, ...], what: str) -> str:
        if value not in options:
            raise self.fail(path, f"{what} must be one of {', '.join(options)}{knobs.meant(value, options)}", value)
        return value


def check_objective(c: Checker, raw: object) -> Objective:
    path = ("objective",)
    obj = c.mapping(path, raw, ("metric", "direction", "metrics", "constraints"))
    metrics: list[tuple[str, Direction]] = []
    if "metrics" in obj:
        if "metric" in obj or "direction" in obj:
            raise c.fail(path, "give either metric + direction or metrics, not both", show_value=False)
        many = c.mapping(path + ("metrics",), obj["metrics"], OBJECTIVE_METRICS)
        if not obj["metrics"]:
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
        if not isinstance(bound, dict):
            raise c.fail(path + ("constraints", metric), "a constraint is a bound, {max: N} or {min: N}", bound)
        b = c.mapping(path + ("constraints", metric), bound, ("max", "min"))
        if not b and bound:
            continue  # only unknown keys, each noted
        if len(b) != 1:
            raise c.fail(path + ("constraints", metric), "give exactly one of max or min", show_value=False)
        (kind, limit), = b.items()
        c.number(path + ("constraints", metric, kind), limit, f"the {kind} bound")
        constraints.append(Constraint(metric, **{kind: float(limit)}))
    return Objective(tuple(metrics), tuple(constraints))


def check_search(c: Checker, raw: object, space: dict[str, Dimension], named: tuple[str, ...] = ()) -> SearchSettings:
    """``named``: every parameter the spec names (space's and fixed's, valid or not)."""
    path = ("search",)
    s = c.mapping(path, raw, ("sampler", "n_trials", "stop", "band", "seed", "max_failures", "timeout_min",
                              "patience", "skip_predicted_oom", "memory_order", "allow_swap", "grace_period_s",
                              "outage_s"))
    sampler = c.one_of(path + ("sampler",), s.get("sampler", "auto"), SAMPLERS, "sampler")
    stop = c.one_of(path + ("stop",), s.get("stop", "auto"), STOPS, "stop")
    band = c.number(path + ("band",), s.get("band", 0.02), "band", positive=True)
    if band > 0.5:
        raise c.fail(path + ("band",), "band is a fraction of the best (0.02 = within 2%) and must be at most 0.5", band)
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
    outage_s = c.number(path + ("outage_s",), s.get("outage_s", 300.0), "outage_s", positive=True)
    return SearchSettings(sampler=sampler, n_trials=n_trials, stop=stop, band=band, outage_s=outage_s, seed=seed,  # type: ignore[arg-type]  # sampler and stop: one_of checked each is one of the Literal's words
                          max_failures=max_failures,
                          timeout_min=timeout_min, patience=patience, skip_predicted_oom=skip,
                          allow_swap=allow_swap, grace_period_s=grace,
                          memory_order=check_memory_order(c, s.get("memory_order") or {}, space, named))


def check_memory_order(c: Checker, raw: Any, space: dict[str, Dimension], named: tuple[str, ...] = ()) -> dict[str, Any]:
    from orchestrator.spec.model import DEFAULT_ORDER, ORDER_WORDS

    path = ("search", "memory_order")
    c.mapping(path, raw, tuple(raw) if isinstance(raw, dict) else ())
    order: dict[str, Any] = dict(DEFAULT_ORDER)
    for name, rule in raw.items():
        where = path + (name,)
        if name not in space and name not in named:  # a misspelt name ordered nothing, and the search went on
            hint = difflib.get_close_matches(str(name), [*space, *named], n=1, cutoff=0.6)
            did = f"did you mean {hint[0]!r}? " if hint else ""
            raise c.fail(where, f"{did}memory_order names parameters of space (or fixed): "
                         f"{', '.join(space) or 'none in space'}", name)
        if isinstance(rule, dict):
            for value, rank in rule.items():
                if not knobs.is_number(rank):
                    raise c.fail(where + (value,), "memory ranks must be numbers (higher = more memory)", rank)
            dim = space.get(name)
            if isinstance(dim, Choice):  # keys are text (yamlsource): "false", "1" name the choices false, 1
                spelled: dict[str, Any] = {}
                for v in dim.values:
                    spelled.setdefault(str(v), v)
                    spelled.setdefault(show(v).strip("'"), v)
                rule = {(spelled.get(k, k) if isinstance(k, str) else k): rank for k, rank in rule.items()}
                missing = [v for v in dim.values if v not in rule]
                extra = [v for v in rule if v not in dim.values]
                if extra:
                    raise c.fail(where + (extra[0],), f"no choice of space.{name} (its choices: "
                                 f"{', '.join(map(show, dim.values))})", extra[0])
                if missing:
                    raise c.fail(where, f"give a rank to every choice of space.{name}; missing "
                                 f"{', '.join(map(show, missing))}", show_value=False)
        elif rule not in ORDER_WORDS:
            raise c.fail(where, f"a memory order is {', '.join(ORDER_WORDS)} or a mapping of value to rank", rule)
        order[name] = rule
    return order


DEVICE_SLOT = re.compile(r"(cuda(:\d+)?|mps|cpu(:\d+(-\d+)?)?)")


def check_devices(c: Checker, raw: object) -> tuple[str, ...] | None:
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
        if item == "auto" and len(items) > 1:
            raise c.fail(where, "auto stands alone (it is every visible GPU): give it or a list of "
                         "slots, not both", item)
        if not isinstance(item, str) or not (item == "auto" or DEVICE_SLOT.fullmatch(item)):
            raise c.fail(where, rule, item)
        m = re.fullmatch(r"cpu:(\d+)-(\d+)", item)
        if m and int(m.group(1)) > int(m.group(2)):
            raise c.fail(where, "a core range A-B needs A <= B", item)
    if twice := next((item for i, item in enumerate(items) if item in items[:i]), None):
        raise c.fail(path, "a device slot is listed twice (one trial per device at a time)", twice)
    return tuple(items)


def check_trial(c: Checker, raw: object) -> TrialSettings:
    path = ("trial",)
    t = c.mapping(path, raw, ("warmup_steps", "measure_steps", "min_measure_s", "precision", "timeout_s", "repeats"))
    d = TrialSettings()
    repeats = t.get("repeats", d.repeats)
    if repeats != "auto" and (not knobs.is_int(repeats) or repeats < 1):
        raise c.fail(path + ("repeats",), "repeats must be a positive integer or auto (as many as the noise "
                     "needs: the auto search measures its leaders again where it cannot tell them apart)", repeats)
    if isinstance(repeats, int) and repeats > MAX_TRIAL_REPEATS:
        raise c.fail(path + ("repeats",), f"repeats must be at most {MAX_TRIAL_REPEATS} (each repeat is a "
                     "whole training process)", repeats)
    return TrialSettings(  # each field's error kept, the others still checked (a fault tour saw one of two)
        repeats=repeats,
        warmup_steps=c.attempt(lambda: c.integer(path + ("warmup_steps",), t.get("warmup_steps", d.warmup_steps), 1,
                                                 "warmup_steps"), d.warmup_steps),
        measure_steps=c.attempt(lambda: c.integer(path + ("measure_steps",), t.get("measure_steps", d.measure_steps), 1,
                                                  "measure_steps"), d.measure_steps),
        min_measure_s=c.attempt(lambda: c.number(path + ("min_measure_s",), t.get("min_measure_s", d.min_measure_s),
                                                 "min_measure_s", nonneg=True), d.min_measure_s),
        timeout_s=c.attempt(lambda: c.number(path + ("timeout_s",), t.get("timeout_s", d.timeout_s), "timeout_s",
                                             positive=True), d.timeout_s),
        precision=c.attempt(lambda: check_precision(c, path + ("precision",), t.get("precision", d.precision)),
                            d.precision),
    )


def check_precision(c: Checker, path: tuple, value: object) -> float | None:
    """``trial.precision``: None, or a fraction in (0, 0.5]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 0.5:
        raise c.fail(path, "precision must be a fraction above 0 and at most 0.5 (0.005 closes the window "
                     "once its throughput is known within +-0.5%), or null", value)
    return float(value)


_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")
_DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary",
                    "mysqldb": "mysqlclient", "pymysql": "PyMySQL"}


def check_url(c: Checker, path: tuple, value: object, what: str) -> str:
    """A URL Optuna (storage) or MLflow (tracking_uri) can open; the connection itself is tried
    at run time, but a missing database driver is caught here, before anything runs."""
    example = DEFAULT_STORAGE if what == "storage" else DEFAULT_TRACKING_URI
    if not isinstance(value, str) or not value.strip():
        raise c.fail(path, f"{what} must be a URL such as {example}", value)
    from orchestrator.redact import shown

    checked, value = value, shown(value)  # errors below quote the URL: never with its password
    if what == "tracking_uri":
        if value == "databricks" or re.match(r"^(https?|databricks)://", value):
            return checked
        if value.startswith("file:"):
            raise c.fail(path, f"MLflow 3 refuses the file store; use a URL such as {example}", value)
        if not _URL.match(value):
            raise c.fail(path, "MLflow 3 refuses a plain folder as tracking store; "
                         f"use a URL such as {example}", value)
    if is_sqlite_file(checked):
        return checked  # a database file: the usual case needs no SQLAlchemy (0.2-0.5 s to import)
    from sqlalchemy.engine import make_url  # no engine is created here
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(checked)
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
            other = ""
            if "+" not in url.drivername and backend == "postgresql" and driver != "psycopg2" \
                    and importlib.util.find_spec("psycopg2") is not None:  # the postgres extra's driver
                other = ", or name the driver installed, as postgresql+psycopg2://"
            raise c.fail(path, f"{what} needs the {backend} driver {driver}, which is not installed "
                         f"(pip install '{package}'{other})", value) from None
    return checked
