"""The spec a study was made from, against the spec now (``space.fingerprint``, stored with the
study): what differs, the refusal that names it, and whether the study holds anything the
difference could make wrong. A study with no result yet (every trial failed or was cut off; a
tour's script sweep whose every trial said "set samples_per_step", then given one) takes the spec
as it is now; one with a result, or a trial running, refuses it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from orchestrator.errors import StudyError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
from orchestrator.redact import shown
from orchestrator.spec.load import SweepSpec

HOLDING = ("COMPLETE", "PRUNED", "RUNNING")
"""Optuna states of a trial that holds a result (or may soon): the spec it ran under stands."""


def holds_results(trials: Iterable[Any]) -> bool:
    """Whether any trial has a result or is running (``HOLDING``)."""
    return any(t.state.name in HOLDING for t in trials)  # Optuna's trials and ``studyread``'s alike


def comparable(stored: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` without the parts a study made by an earlier version did not store (its
    ``constraints``: a tour added a memory budget to a started study, the old trials kept their
    feasibility and the best reported broke the budget; such a study keeps that behaviour)."""
    return {k: v for k, v in wanted.items() if k in stored or k != "constraints"}


def as_stored(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint as the storage gives it back (tuples as lists), to compare with a stored one."""
    return json.loads(json.dumps(fingerprint))


def changed(spec: SweepSpec, url: str, stored: dict[str, Any], wanted: dict[str, Any], trials: Iterable[Any]) -> str | None:
    """None where the study's spec is the spec now; else what differs, where the study takes the
    spec as it is now (no result yet); ``spec_mismatch`` raised where it holds results, or where
    Optuna would refuse the spec's values (``conflict``)."""
    wanted = comparable(stored, wanted)
    trials = list(trials)
    if stored == wanted:
        if not holds_results(trials) and (why := conflict(wanted, trials)) is not None:  # an edit a version before took
            raise mismatch(spec, url, why)
        return None
    if holds_results(trials):
        raise spec_mismatch(spec, url, stored, wanted)
    if (why := conflict(wanted, trials)) is not None:
        raise mismatch(spec, url, f"{differences(stored, wanted)}; {why}")
    return differences(stored, wanted)


def conflict(wanted: dict[str, Any], trials: list[Any]) -> str | None:
    """A parameter a trial was given whose values the spec now gives otherwise than Optuna allows
    within one study (a list's values changed, a range's ``log``, a list made a range): Optuna
    keeps a parameter's distribution for the study's life, so the run would fail at its first
    trial (a tour: an interrupted first trial, then a batch size dropped from the list). None
    where there is none."""
    from orchestrator.store.studyread import parse_distribution

    space = wanted.get("space") or {}
    for t in trials:
        for name, dist in getattr(t, "distributions", {}).items():
            if name not in space:
                continue
            kind, choices, log = parse_distribution(dist if isinstance(dist, str) else _as_json(dist))
            now = space[name]
            if isinstance(now, list):
                same = kind == "categorical" and choices == tuple(now)
            else:
                integer = isinstance(now.get("low"), int) and isinstance(now.get("high"), int)
                same = kind == ("int" if integer else "float") and log == bool(now.get("log"))
            if not same:
                words = ("log-scale " if log else "") + ("integer" if kind == "int" else "float") + " range"
                given = f"from {json.dumps(list(choices))}" if choices is not None else \
                    f"from {'an' if words[0] in 'aeiou' else 'a'} {words}"
                return f"trial {t.number} was given {name} {given}, and Optuna keeps a parameter's values for the study's life"
    return None


def _as_json(distribution: BaseDistribution) -> str:
    from optuna.distributions import distribution_to_json

    return distribution_to_json(distribution)


def spec_mismatch(spec: SweepSpec, url: str, stored: dict[str, Any], wanted: dict[str, Any]) -> StudyError:
    """The error for a spec whose fingerprint (``space.fingerprint``, as stored) differs from the
    study's: each part that differs, stored and now."""
    return mismatch(spec, url, differences(stored, wanted))


def differences(stored: dict[str, Any], wanted: dict[str, Any]) -> str:
    """Each part of two fingerprints that differs, stored and now."""
    return "; ".join(f"{k}: stored {json.dumps(stored.get(k))}, spec {json.dumps(wanted.get(k))}"
                     for k in sorted(set(stored) | set(wanted)) if stored.get(k) != wanted.get(k))


def mismatch(spec: SweepSpec, url: str, what: str) -> StudyError:
    """The refusal of a study made from another spec (``what``: how it differs), with both ways on."""
    from orchestrator.invocation import command
    from orchestrator.urls import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, absolute_uri, command_flags

    flags = command_flags(spec, None, (DEFAULT_STORAGE, DEFAULT_TRACKING_URI))
    return StudyError(  # the store as the Study: lines name it (a relative SQLite path made absolute)
        f"study {spec.name!r} in {shown(absolute_uri(url))} was created from a different spec ({what}). "
        f"To keep both, give this spec a new `name:`; to start over, delete the old study with its "
        f"MLflow runs and trial folders: {command('delete', spec.path, *flags)}")
