"""Running a finished study's command again: its summary, without torch, MLflow or Optuna.

A study has nothing left to run when it holds every result its budget asks for, or the ``auto``
search judges it done (the same verdict the sweep stopped on: it depends only on the results),
and nothing of it is running, queued, cut off or due for a retry. Then, and only when the machine
is the one the study was run on (``machine``: device, torch version, device names, compared
without starting anything), the summary is printed from the SQLite study's tables
(``studyread``), and no probe, no fork server and no device are started. MLflow is opened only
when the study's mark (``agreement.recorded``: how many trials MLflow held when last compared,
and, for an SQLite tracking store, two counting queries) does not match: then the records it
lacks are written from the study (``store.repair``), and the summary says how many. Anything else
(a server database, ``--retry``, a changed machine) goes the whole way: the run checks and
repairs, and prints the same summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.errors import StudyError
from orchestrator.outcome import RUN_AGAIN, VERDICT_DETAIL
from orchestrator.spec.load import SweepSpec
from orchestrator.urls import Origins

if TYPE_CHECKING:
    from orchestrator.store.studyread import StoredStudy
    from orchestrator.search.verdict import Decision
    from orchestrator.search.space import Plan


def finished(spec: SweepSpec, origins: Origins) -> tuple[list[str], StoredStudy] | None:
    """The lines to print for a study with nothing to run, and the study as read (``--export``
    writes its best from it), or None (see the module)."""
    from orchestrator.report.closing import parent_close, summary, target_of, trial_time_s
    from orchestrator.report.summary import of_target
    from orchestrator.machine import facts
    from orchestrator.store.agreement import recorded
    from orchestrator.store.record import TrialRecord, is_attempt, status_of
    from orchestrator.store.records import rank, results_of
    from orchestrator.search.space import config_key, fingerprint, make_plan, plan_device
    from orchestrator.store.fingerprint import as_stored, changed, comparable
    from orchestrator.urls import sqlite_path
    from orchestrator.store.studyrecord import StudyRecord
    from orchestrator.store.studyread import read_study
    from orchestrator.urls import absolute_uri

    if sqlite_path(spec.storage) is None:
        return None
    try:
        study = read_study(absolute_uri(spec.storage), spec.name)
    except StudyError:
        return None  # unreadable: the whole way says why, and what to do
    if study is None:
        return None
    device = plan_device(spec)
    plan = make_plan(spec, device)
    attrs = StudyRecord.of(study)
    stored = attrs.fingerprint
    wanted = as_stored(fingerprint(spec, plan))
    if stored is None or stored != comparable(stored, wanted):
        # An edited spec is refused here, before the probe (seconds of start-up), where the device
        # is the study's own: named in the spec, or guessed as the study recorded it; one the study
        # takes (no result yet) is taken by the whole way's open_study.
        if stored is not None and stored.get("device") == wanted.get("device"):
            changed(spec, spec.storage, stored, wanted, study.trials)
        return None
    machine = attrs.machine or {}
    if {k: machine.get(k) for k in ("devices", "torch_version", "device_names")} != facts(plan.devices):
        return None
    trials = study.trials
    if any(not t.state.is_finished() for t in trials):
        return None  # running (cut off: recovery) or queued
    results = results_of(trials)
    have = {config_key(t.params) for t in results}
    if any(status_of(t) in RUN_AGAIN and config_key(t.params) not in have and TrialRecord.of(t).detail != VERDICT_DETAIL
           for t in trials if is_attempt(t) and t.params):
        return None  # retried on every invocation
    configs, target = target_of(spec, plan)
    native = machine.get("native_half")
    decision = _decision(spec, plan, configs, results, machine.get("memory_limit_gib"),
                         None if native is None else frozenset(native))
    if decision is None and len(results) < target or decision is not None and decision.config is not None:
        return None  # the search goes on (with every result in: it measures its leaders again)
    stopped = None
    if decision is not None and (len(results) < target or decision.verdict.unsure):
        stopped = decision.verdict.reason
    repaired = []
    if not recorded(study, spec.tracking_uri):  # MLflow may lack records: written from the study
        from orchestrator.store.converge import Settled
        from orchestrator.store.repair import repair
        from orchestrator.store.writefault import StoreUnwritable

        said: list[str] = []  # a moved project's artifact locations, pointed here (``store.moved``)
        try:
            n = repair(spec, lambda live: parent_close(spec, live.get_trials(deepcopy=False), target, stopped),
                       restored=said)
        except StoreUnwritable as exc:
            raise exc.with_outcome("nothing was run: the study holds every result, and the same command writes "
                                   "MLflow's missing records once the store can be written") from None
        repaired = Settled(n, 0).lines() + [f"orchestrate: {line}" for line in said]
    first = (f"orchestrate: {spec.name} on {', '.join(plan.devices)} (as recorded with the study: nothing to "
             f"run, so nothing was started), torch {machine['torch_version']}; {of_target(len(results), target)} trials done")
    best = rank(results, spec)
    last_load = attrs.load[-1] if attrs.load else None
    return [first] + summary(spec, results, best, target, trial_time_s(trials), 0.0, stopped,
                             stopped is not None, origins, last_load) + repaired, study


def _decision(spec: SweepSpec, plan: Plan, configs: list[dict[str, Any]] | None, results: list[Any],
              memory_limit_gib: float | None, native_half: frozenset[str] | None) -> Decision | None:
    """What the ``auto`` search would do next with these results (None: it does not apply): no
    configuration means it is done, and its verdict says why."""
    from orchestrator.keys import config_key
    from orchestrator.search.planners import planner_for
    from orchestrator.search.strategy import planned

    if not configs or not planned(spec) or spec.search.stop != "auto":
        return None
    (metric, direction), = spec.objective.metrics
    planner = planner_for(configs, plan.searched, metric, direction, plan.device, spec.search.memory_order,
                          spec.search.band, memory_limit_gib, native_half, again=spec.trial.repeats == "auto",
                          keep=True)  # the sweep takes it over
    return planner.decide({config_key(t.params): t for t in results}, set())
