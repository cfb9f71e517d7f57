"""``report`` and ``best`` on a spec edited since its study ran: the study read with the spec it ran
(its stored fingerprint, ``space.fingerprint``), said in one line, instead of refused.

A tour added a batch size to a finished study's spec and asked for the report first: it was refused
as the sweep refuses the edit, with "delete the old study" as one way on. Reading the trials
against the edited spec would rank them wrongly (the sweep's reason to refuse), so they are read
against the spec they ran: its workload, device, fixed values, space and objective as stored. Where
that spec cannot be rebuilt to the very fingerprint stored (a study an older version made, say), the
refusal stands.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from orchestrator.errors import StudyError
from orchestrator.spec.load import SweepSpec

if TYPE_CHECKING:
    from orchestrator.store.studyread import StoredStudy


def read_as_ran(spec: SweepSpec, study: StoredStudy) -> tuple[SweepSpec, str | None]:
    """The spec to read ``study`` with, and the line to say where it is not ``spec`` as it is now.
    Raises the sweep's refusal (``store.fingerprint``) where the spec it ran cannot be rebuilt."""
    from orchestrator.search.space import fingerprint, make_plan, plan_device
    from orchestrator.store.fingerprint import as_stored, changed, differences
    from orchestrator.store.studyrecord import StudyRecord

    stored = StudyRecord.of(study).fingerprint
    if stored is None:
        return spec, None
    device = plan_device(spec, stored.get("device"))
    now = as_stored(fingerprint(spec, make_plan(spec, device)))
    try:
        changed(spec, spec.storage, stored, now, study.trials)
        return spec, None
    except StudyError as refused:
        try:
            ran = _ran(spec, stored)
            changed(ran, ran.storage, stored, as_stored(fingerprint(ran, make_plan(ran, device))), study.trials)
        except (StudyError, KeyError, TypeError, ValueError):
            raise refused from None
    return ran, (f"the spec was edited since study {spec.name!r} ran ({differences(stored, now)}): read with the "
                 "spec it ran; to run the edited spec, give it a new `name:`")


def _ran(spec: SweepSpec, stored: dict[str, Any]) -> SweepSpec:
    """``spec`` with the workload, fixed values, space and objective its study stored."""
    from orchestrator.spec.model import Choice, Constraint, Dimension, Objective, Range

    def dim(d: list[Any] | dict[str, Any]) -> Dimension:
        if isinstance(d, list):
            return Choice(tuple(d))
        integer = isinstance(d["low"], int) and isinstance(d["high"], int)
        return Range(d["low"], d["high"], d.get("step"), bool(d.get("log")), integer)

    constraints = spec.objective.constraints if "constraints" not in stored else tuple(
        Constraint(metric, **bounds) for metric, bounds in stored["constraints"].items())
    workload: dict[str, Any] = {"experiment": stored["experiment"], "script": None, "args": ()} \
        if "experiment" in stored else {"experiment": None, "script": stored["script"], "args": tuple(stored["args"]),
                                        "samples_per_step": stored.get("samples_per_step")}
    if workload["script"] != spec.script:  # the file found for the edited spec's script is not the one it ran
        workload["script_file"] = None
    fixed = stored["fixed"]  # stored sorted: in the spec's order where it names them (best's YAML)
    return dataclasses.replace(
        spec, **workload, fixed={**{k: fixed[k] for k in spec.fixed if k in fixed}, **fixed},
        space={k: dim(v) for k, v in stored["space"].items()},
        objective=Objective(tuple((m, d) for m, d in stored["objective"]), constraints))
