"""The rules of the parameters: a fixed value or choice against its knob's rule, a space entry
(a list of choices or a range), the size of the space, and the rules that join two parameters
(``effective_batch_size`` and ``batch_size``, the two MPS watermarks), checked over every
combination the space holds. The section rules (objective, search, trial, devices, URLs) and the
``Checker`` that words every error are in ``orchestrator.spec.rules``."""

from __future__ import annotations

import itertools
import math
from typing import Any

from orchestrator.spec import knobs
from orchestrator.spec.model import MAX_CONFIGURATIONS, Choice, Dimension, Range, SweepSpec
from orchestrator.spec.rules import Checker, quoted_number

RANGE_KEYS = ("low", "high", "step", "log")
"""The keys of a range in ``space:``; ``low`` and ``high`` are required."""


def check_value(c: Checker, path: tuple, name: str, value: Any) -> Any:
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


def _same_key(value: object) -> Any:
    """Values a trial cannot tell apart compare equal (1 and 1.0; not true and 1)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    return (type(value).__name__, value)


def check_dimension(c: Checker, path: tuple, name: str, value: object) -> Dimension:
    if isinstance(value, list):
        if not value:
            raise c.fail(path, "a list of choices must not be empty", show_value=False)
        values = []
        seen: set[Any] = set()
        for i, item in enumerate(value):
            if name == "device" and item == "auto":
                raise c.fail(path + (i,), "a swept device must be mps, cuda or cpu", item)
            values.append(check_value(c, path + (i,), name, item))
            if _same_key(item) in seen:
                raise c.fail(path + (i,), "choices must not repeat", item)
            seen.add(_same_key(item))
        if any(knobs.is_number(v) for v in value):  # 64 and '64' reach a module as two types
            for i, item in enumerate(value):
                if quoted_number(item):
                    raise c.fail(path + (i,), "a quoted number among numbers reaches the trial as a string", item)
        return Choice(tuple(values))
    if not isinstance(value, dict):
        raise c.fail(path, "a space entry is a list of choices or a range {low, high, step, log} "
                     "(a single value belongs in fixed)", value)
    c.mapping(path, value, RANGE_KEYS, ("low", "high"))
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
        check_value(c, path + (bound,), name, v)
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


def _values(fixed: dict[str, Any], space: dict[str, Dimension], name: str,
            ends: bool = False) -> tuple[tuple[str, str], tuple[Any, ...] | None] | None:
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


def check_space_size(c: Checker, space: dict[str, Dimension]) -> None:
    """A finite space of more than ``MAX_CONFIGURATIONS`` is refused at the line of its largest
    dimension (the product is computed from the sizes, never listed)."""
    counted = {name: _count(dim) for name, dim in space.items()}
    if not counted or any(n is None for n in counted.values()):
        return  # a continuous dimension: sampled, never listed
    sizes = {name: n for name, n in counted.items() if n is not None}  # every one (above)
    total = math.prod(sizes.values())
    if total > MAX_CONFIGURATIONS:
        largest = max(sizes, key=lambda k: sizes[k])
        raise c.fail(("space", largest), f"the space holds {total:,} configurations ("
                     + " x ".join(f"{k} {n:,}" for k, n in sizes.items()) + f"), more than a sweep can "
                     f"visit (at most {MAX_CONFIGURATIONS:,}); list fewer values, or give a range "
                     "without a step so that it is sampled", show_value=False)


def _item(where: tuple, values: tuple[Any, ...], value: object, space: dict[str, Dimension]) -> tuple:
    """The path of ``value`` inside a list of choices (so the message points at its line)."""
    if where[0] == "space" and isinstance(space.get(where[1]), Choice):
        return where + (values.index(value),)
    return where


def check_combinations(c: Checker, fixed: dict[str, Any], space: dict[str, Dimension]) -> None:
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
                         "effective_batch_size needs batch_size as a fixed value, a list of choices or a stepped range", show_value=False)
        for where, values in (bs, eff):
            if values is None:
                raise c.fail(where, f"every effective_batch_size is checked against every batch size, so this "
                             f"range must list at most {MAX_CONFIGURATIONS:,} values; give a step or a list",
                             show_value=False)
        assert bs[1] is not None and eff[1] is not None  # refused above
        if len(bs[1]) * len(eff[1]) > MAX_CONFIGURATIONS:
            raise c.fail(eff[0], f"{len(bs[1]):,} batch sizes x {len(eff[1]):,} effective batch sizes are more "
                         f"than {MAX_CONFIGURATIONS:,} combinations to check; give fewer values", show_value=False)
        for b, e in itertools.product(bs[1], eff[1]):
            if e % b:
                raise c.fail(_item(bs[0], bs[1], b, space),
                             f"each batch size must divide effective_batch_size {e}", b)
    high = _values(fixed, space, "mps_high_watermark_ratio", ends=True)
    low = _values(fixed, space, "mps_low_watermark_ratio", ends=True)
    if low is not None:  # ratios are floats: their values listed or their ends, never None
        for h, lo in itertools.product(high[1] if high else (knobs.MPS_DEFAULT_HIGH_WATERMARK,), low[1]):  # type: ignore[arg-type]  # a ratio's values: never None
            if h != 0.0 and lo > h:
                if high is None:
                    raise c.fail(_item(low[0], low[1], lo, space), "the low watermark must not exceed "  # type: ignore[arg-type]  # as above
                                 f"MPS's default high one, {h}, when mps_high_watermark_ratio is not given", lo)
                raise c.fail(_item(low[0], low[1], lo, space), "the low watermark must not exceed "  # type: ignore[arg-type]  # as above
                             f"the high one ({h})", lo)


def check_cuda_fraction(spec: SweepSpec) -> None:
    """CUDA's fraction is of total memory, at most 1.0 (MPS allows up to 2.0)."""
    swept = spec.space.get("memory_fraction")
    values: list[tuple[tuple, float]] = []
    if "memory_fraction" in spec.fixed:
        values.append((("fixed", "memory_fraction"), spec.fixed["memory_fraction"]))
    elif isinstance(swept, Choice):
        values += [(("space", "memory_fraction", i), v) for i, v in enumerate(swept.values)]
    elif swept is not None:
        values.append((("space", "memory_fraction", "high"), swept.high))
    for path, value in values:
        if value > 1:
            raise spec.error(path, f"on CUDA memory_fraction must be at most 1.0, got {value}")
