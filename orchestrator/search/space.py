"""From a spec to what is searched on one device: the plan, the grid, Optuna distributions.

Pure functions; Optuna is imported only inside the functions that build its objects, so the
dry-run can use the rest without it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import platform
import shutil
from dataclasses import dataclass
from typing import Any, Iterator

from orchestrator.keys import canonical_float, config_key, value_key  # noqa: F401 - their home before keys.py
from orchestrator.spec import knobs
from orchestrator.spec.load import Choice, Dimension, SweepSpec


@dataclass(frozen=True)
class Plan:
    """What a sweep searches once its device is known."""

    device: str
    """The resolved device, or "swept" when ``space.device`` lists several."""
    searched: dict[str, Dimension]
    """Dimensions Optuna samples (knobs the device does not read are left out)."""
    fixed: dict[str, Any]
    not_applied: dict[str, str]
    """Knob -> why it is not applied on this device (fixed or swept, never silently dropped)."""

    @property
    def devices(self) -> tuple[str, ...]:
        dim = self.searched.get("device")
        return tuple(dim.values) if isinstance(dim, Choice) else (self.device,)

    def finite(self) -> bool:
        return all(isinstance(d, Choice) or d.step is not None for d in self.searched.values())


def guess_device() -> str:
    """Resolve ``auto`` without importing torch (for ``--dry-run``): a real run asks torch."""
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return "mps"
    if os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi"):
        return "cuda"
    return "cpu"


def plan_device(spec: SweepSpec, auto: str | None = None) -> str:
    """The device a plan is made for before anything starts: the CPU where the device is swept (the
    parent plans there; each trial names its own), the device the spec names, else for ``auto``
    the one given (a study's recorded device) or ``guess_device``'s."""
    if "device" in spec.space:
        return "cpu"
    if spec.device != "auto":
        return spec.device
    return auto or guess_device()


def make_plan(spec: SweepSpec, device: str) -> Plan:
    """Drop swept knobs that ``device`` does not read; note every knob that is not applied."""
    not_applied: dict[str, str] = {}
    searched: dict[str, Dimension] = {}
    swept_devices = spec.space.get("device")
    for name, dim in spec.space.items():
        knob = knobs.KNOBS.get(name)
        if isinstance(swept_devices, Choice) and knob is not None and name != "device":
            if not any(d in knob.devices for d in swept_devices.values):
                not_applied[name] = f"read on {'/'.join(sorted(knob.devices))} only; not searched"
                continue
        elif knob is not None and not isinstance(swept_devices, Choice) and device not in knob.devices:
            not_applied[name] = f"read on {'/'.join(sorted(knob.devices))} only; not searched on {device}"
            continue
        searched[name] = dim
    for name in spec.fixed:
        knob = knobs.KNOBS.get(name)
        if knob is not None and not isinstance(swept_devices, Choice) and device not in knob.devices:
            not_applied[name] = f"read on {'/'.join(sorted(knob.devices))} only; ignored on {device}"
    if device == "cpu" and platform.system() == "Darwin" and "cpu_memory_limit_gib" in spec.fixed:
        not_applied["cpu_memory_limit_gib"] = "macOS does not enforce RLIMIT_DATA; ignored"
    return Plan(device="swept" if isinstance(swept_devices, Choice) else device,
                searched=searched, fixed=dict(spec.fixed), not_applied=not_applied)


def dim_values(dim: Dimension) -> tuple[Any, ...]:
    """A finite dimension's values: a list's, or a stepped range's (both ends)."""
    return dim.values if isinstance(dim, Choice) else dim.grid_values()


def applicable(plan: Plan, device: str) -> list[str]:
    """Names Optuna samples for a trial on ``device``, in spec order (device first)."""
    names = [n for n in plan.searched if n == "device" or knobs.applies(n, device)]
    return sorted(names, key=lambda n: n != "device")


_made: tuple[str, list[dict[str, Any]]] | None = None


def configurations(plan: Plan) -> list[dict[str, Any]]:
    """Every configuration of a finite space, in spec order; knobs a device does not read are
    left out of that device's configurations, so none differ only in an unread setting. The last
    plan's are kept (a resumed study's command asks twice; 100,000 of them take a second): each
    caller gets its own list of the same dictionaries, which nobody changes."""
    global _made
    key = repr(plan)
    if _made is None or _made[0] != key:
        _made = (key, list(_configurations(plan)))
    return list(_made[1])


def first_configuration(plan: Plan) -> dict[str, Any] | None:
    """``configurations(plan)[0]`` without making the others (a space may hold 100,000)."""
    return next(_configurations(plan), None)


def _configurations(plan: Plan) -> Iterator[dict[str, Any]]:
    seen: set[str] = set()
    for device in plan.devices:
        names = [n for n in applicable(plan, device) if n != "device"]
        lead = {"device": device} if "device" in plan.searched else {}
        for combo in itertools.product(*(dim_values(plan.searched[n]) for n in names)):
            config = {**lead, **dict(zip(names, combo))}
            key = config_key(config)
            if key not in seen:
                seen.add(key)
                yield config


def count_configurations(plan: Plan) -> int | None:
    return len(configurations(plan)) if plan.finite() else None


def shared_env(plan: Plan) -> dict[str, str] | None:
    """The environment every trial of ``plan`` starts with, when all need the same one (most
    sweeps set no allocator variable); None when it differs between configurations."""
    if plan.finite():  # over the values of what the environment depends on: the device and its knobs
        relevant = dataclasses.replace(plan, searched={n: d for n, d in plan.searched.items()
                                                       if n == "device" or n in knobs.ENV_KNOBS})
        envs = {json.dumps(knobs.trial_env(p, p["device"]), sort_keys=True)
                for p in (trial_params(plan, c) for c in configurations(relevant))}
        return json.loads(envs.pop()) if len(envs) == 1 else None
    if any(n == "device" or n in knobs.ENV_KNOBS for n in plan.searched):
        return None
    params = trial_params(plan, {})
    return knobs.trial_env(params, params["device"])


def suggest(trial: Any, plan: Plan) -> dict[str, Any]:
    """Sample one configuration define-by-run: the device first, then what that device reads. The
    one mapping from a spec's dimension to Optuna's distribution: a list is categorical, an
    integer range ``IntDistribution`` (step 1 unless given), any other range ``FloatDistribution``;
    both bounds inclusive, ``log`` as the spec says."""
    params: dict[str, Any] = {}
    device = plan.device
    if "device" in plan.searched:
        device = trial.suggest_categorical("device", list(plan.searched["device"].values))  # type: ignore[union-attr]  # device is always a list (a Choice)
        params["device"] = device
    for name in applicable(plan, device):
        if name == "device":
            continue
        dim = plan.searched[name]
        if isinstance(dim, Choice):
            params[name] = trial.suggest_categorical(name, list(dim.values))
        elif dim.integer:
            params[name] = trial.suggest_int(name, int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log)
        else:
            params[name] = trial.suggest_float(name, float(dim.low), float(dim.high), step=dim.step, log=dim.log)
    return params


def contains(plan: Plan, params: dict[str, Any]) -> bool:
    """Whether ``params``, a trial's sampled values, is a configuration of ``plan``: the names its
    device reads, each value one ``suggest`` could give (a list's, by Optuna's equality; within a
    range, on its step). A study with no result takes an edited spec, and a configuration queued
    to run again that the edit removed could not be told to Optuna (``recovery.retry_queue``)."""
    device = params.get("device", plan.device)
    if set(params) != set(applicable(plan, device)) or (
            "device" in plan.searched and device not in plan.searched["device"].values):  # type: ignore[union-attr]  # a Choice
        return False
    for name in set(params) - {"device"}:
        dim, value = plan.searched[name], params[name]
        if isinstance(dim, Choice):
            if value not in dim.values:
                return False
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not dim.low <= value <= dim.high:
            return False
        elif dim.step and abs((value - dim.low) / dim.step - round((value - dim.low) / dim.step)) > 1e-6:
            return False
    return True


def trial_params(plan: Plan, sampled: dict[str, Any]) -> dict[str, Any]:
    """Everything the trial process receives: fixed values, sampled values, derived values."""
    device = sampled.get("device", plan.device)
    params = {k: v for k, v in plan.fixed.items() if knobs.applies(k, device)}
    params.update(sampled)
    params["device"] = device
    if "effective_batch_size" in params and "batch_size" in params:  # not in shared_env's partial ones
        params["grad_accum_steps"] = params["effective_batch_size"] // params["batch_size"]
    return params


def fingerprint(spec: SweepSpec, plan: Plan) -> dict[str, Any]:
    """What a study is about; a resumed study must match it."""
    def dim(d: Dimension) -> object:
        return list(d.values) if isinstance(d, Choice) else {
            "low": d.low, "high": d.high, "step": d.step, "log": d.log}
    what: dict[str, Any] = {"experiment": spec.experiment} if spec.script is None else {
        "script": spec.script, "args": list(spec.args), "samples_per_step": spec.samples_per_step}
    return {
        **what,
        "device": plan.device,
        "fixed": {k: plan.fixed[k] for k in sorted(plan.fixed)},
        "space": {k: dim(v) for k, v in plan.searched.items()},
        "objective": [list(m) for m in spec.objective.metrics],
        "constraints": {c.metric: {k: v for k, v in (("max", c.max), ("min", c.min)) if v is not None}
                        for c in spec.objective.constraints},  # each trial's feasibility is told with its result
    }


def _ordered(values: tuple[Any, ...]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def distance(a: dict[str, Any], b: dict[str, Any], plan: Plan) -> float:
    """How far apart two configurations of a finite space are: for a numeric dimension, how many
    places apart the two values stand in its sorted list; for any other, 0 if equal else 1. A
    configuration of another device (different keys) is infinitely far."""
    if a.keys() != b.keys():
        return float("inf")
    total = 0.0
    for name, x in a.items():
        y = b[name]
        if config_key({name: x}) == config_key({name: y}):
            continue
        dim = plan.searched.get(name)
        values = dim_values(dim) if dim is not None else ()
        if values and _ordered(values):
            ranked = [canonical_float(float(v)) for v in sorted(values)]
            i, j = (_position(v, ranked) for v in (x, y))
            total += abs(i - j) if i is not None and j is not None else 1
        else:
            total += 1
    return total


def _position(value: Any, ranked: list[float]) -> int | None:
    try:
        return ranked.index(canonical_float(float(value)))
    except (TypeError, ValueError):
        return None


def nearest(config: dict[str, Any], candidates: list[dict[str, Any]], plan: Plan, rng: Any) -> dict[str, Any] | None:
    """The candidate closest to ``config`` (``distance``); ties broken by ``rng``."""
    if not candidates:
        return None
    scored = [(distance(config, c, plan), i) for i, c in enumerate(candidates)]
    best = min(d for d, _ in scored)
    if best == float("inf"):
        return rng.choice(candidates)
    return candidates[rng.choice([i for d, i in scored if d == best])]
