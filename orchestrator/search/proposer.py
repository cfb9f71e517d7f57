"""Which configuration runs next: from Optuna's queue, the grid, or the sampler; never one that
already has a result, is in flight (here or in another orchestrator on the same study), or
failed earlier in this invocation.

``Proposer.next`` holds the study's coordination lock (``coordination.StudyLock``) from reading
what is in flight to writing the new trial's parameters, so two orchestrators never pick the
same configuration. What it cannot run it answers at once, and the sweep loop prints the answer:

- *repeat*: the sampler proposed a configuration that has a result. Optuna gets the recorded
  answer (``repeat_of``); with a model-based sampler in a finite space the nearest configuration
  without a result is queued (``neighbour_of``), so the search refines instead of asking again.
- *deferred*: it proposed one that is in flight. The trial is told FAIL (``deferred_to``), and the
  nearest free configuration is queued the same way.
Neither runs a process nor counts toward ``n_trials``.
"""

from __future__ import annotations

import random
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.search.dominance import predicted_oom
from orchestrator.faultpoints import reached
from orchestrator.outcome import MEMORY_BOUNDARY, Outcome, Status
from orchestrator.search.planner import Planner
from orchestrator.search.planners import planner_for
from orchestrator.search.verdict import Verdict
from orchestrator.store.record import TrialRecord, enqueue, is_attempt, status_of, write
from orchestrator.store.records import results_of
from orchestrator.search.space import Plan, config_key, configurations, nearest, suggest
from orchestrator.spec.load import SweepSpec
from orchestrator.timeline import event

if TYPE_CHECKING:
    from optuna.study import Study

MAX_REPEATED_PROPOSALS = 10  # answered proposals in a row before one is forced (or the space is done)
MODEL_BASED = ("tpe", "nsga2")  # samplers whose re-proposal of a measured point means "exploit it"
WAIT, DONE = "wait", "done"


@dataclass
class View:
    """The study as one read sees it."""

    results: dict[str, Any] = field(default_factory=dict)
    """Config key -> the trial holding its result."""
    in_flight: dict[str, int] = field(default_factory=dict)
    """Config key -> number of a RUNNING trial measuring it (any orchestrator)."""
    queued: set[str] = field(default_factory=set)
    """Config keys waiting in Optuna's queue."""
    strays: list[int] = field(default_factory=list)
    """RUNNING trials without parameters. Seen under the study's lock, none is being proposed:
    each was asked by an orchestrator that died, or lost its connection, before writing them.
    The stale-trial check fails them (after a grace period, later after an outage); on a
    server database the sweep waits for that rather than end with a trial left RUNNING."""

    @property
    def ooms(self) -> list[tuple[int, dict[str, Any]]]:
        """Configurations that ran out of memory (or swapped): the evidence for predicted OOMs."""
        return sorted((t.number, t.params) for t in self.results.values()
                      if status_of(t) in MEMORY_BOUNDARY)


@dataclass
class Proposal:
    trial: Any
    sampled: dict[str, Any]
    predicted_by: int | None = None


class Proposer:
    def __init__(self, spec: SweepSpec, plan: Plan, study: Study, lock: AbstractContextManager[Any],
                 on_answer: Callable[..., None],
                 heartbeat: Callable[[Any], None] = lambda trial: None, neighbours: bool = True,
                 memory_limit_gib: float | None = None, superseded: dict[str, int] | None = None,
                 native_half: frozenset[str] | None = None,
                 owner: str | None = None) -> None:
        """``on_answer(trial, outcome, original_number)`` records a proposal answered without a
        process (an MLflow run and a printed line); ``heartbeat(trial)`` marks a new trial alive;
        ``memory_limit_gib``: what a trial may use on the device, where known (the planner's
        memory model, ``feasibility``); ``native_half``: the CPU's half precisions with
        instructions (``machine.native_half``; the planner's dtype prior); ``superseded``: config key -> trial number below which its
        result does not count (``--retry``, ``recovery.retry_queue``); ``owner``: ``host:pid`` of
        this orchestrator, recorded on each trial it asks for when several share the study (user
        attribute ``orchestrator``: who is running a RUNNING trial)."""
        from orchestrator.store.study import planned

        self.spec, self.plan, self.study, self.lock = spec, plan, study, lock
        self.on_answer, self.heartbeat, self.neighbours = on_answer, heartbeat, neighbours
        self.configs = configurations(plan) if plan.finite() else None
        self.planner: Planner | None = None
        if planned(spec) and self.configs:
            (metric, direction), = spec.objective.metrics
            self.planner = planner_for(self.configs, plan.searched, metric, direction, plan.device,
                                       spec.search.memory_order, spec.search.band, memory_limit_gib, native_half,
                                       again=spec.trial.repeats == "auto")
        self.verdict: Verdict | None = None
        """The planner's last word on whether the search is done (``auto`` sampler)."""
        self.strays: list[int] = []
        """The strays (``View.strays``) the last proposal saw: none once they are failed."""
        target = spec.search.n_trials or (len(self.configs) if self.configs is not None else 0)
        self.target = min(target, len(self.configs)) if self.configs is not None else target
        self.rng = random.Random(spec.search.seed)
        self.answered = 0
        self.failed_here: set[str] = set()
        """Configurations that failed (status error) in this invocation: not tried again in it."""
        self.superseded = dict(superseded or {})
        self.owner = owner
        self.exhausted: str | None = None
        """Why nothing more is proposed, when the study does not have all its results."""

    # -- reading the study ----------------------------------------------------------------------
    def view(self) -> View:
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)  # incremental: Optuna caches finished trials
        results = {}
        for t in results_of(trials):
            key = config_key(t.params)
            if t.number >= self.superseded.get(key, -1):
                results[key] = t
        v = View(results)
        for t in trials:
            if t.state == TrialState.RUNNING and not t.params:
                v.strays.append(t.number)
            elif t.state == TrialState.RUNNING and is_attempt(t):
                v.in_flight.setdefault(config_key(t.params), t.number)
            elif t.state == TrialState.WAITING:
                v.queued.add(config_key(t.system_attrs.get("fixed_params") or {}))
        return v

    def unvisited(self, v: View) -> list[dict[str, Any]]:
        """Configurations of a finite space nobody has measured, is measuring, or failed here."""
        assert self.configs is not None
        return [c for c in self.configs if (k := config_key(c)) not in v.results
                and k not in v.in_flight and k not in self.failed_here]

    # -- proposing ------------------------------------------------------------------------------
    def next(self) -> Proposal | str:
        """A configuration to run, ``WAIT`` (nothing now, but trials in flight may change that) or
        ``DONE`` (``self.exhausted`` says why, unless the study has all its results)."""
        with self.lock:
            for _ in range(4 * MAX_REPEATED_PROPOSALS):
                v = self.view()
                self.strays = v.strays if self.owner is not None else []  # a server database's (see View)
                waiting = bool(v.in_flight or self.strays)
                # with every configuration measured, the auto search may still measure its leaders
                # again (``remeasure``), unless ``n_trials`` said how many to run
                settling = self.planner is not None and self.target == len(self.configs or ())
                if len(v.results) >= self.target and not settling:
                    return WAIT if self.strays else DONE
                if len(v.results) + len(v.in_flight) >= self.target and not settling:
                    return WAIT  # the rest of the budget is in flight
                if not v.queued and self.planner is not None:
                    decision = self.planner.decide(v.results, set(v.in_flight) | self.failed_here,
                                                   stop=self.spec.search.stop == "auto")
                    self.verdict = decision.verdict
                    if decision.config is None:
                        if waiting:
                            return WAIT  # their results may change the verdict
                        if len(v.results) < self.target or decision.verdict.unsure:  # else: as without a search
                            self.exhausted = decision.verdict.reason
                        return DONE
                    again = v.results.get(config_key(decision.config)) if decision.why == "remeasure" else None
                    enqueue(self.study, decision.config, chosen_by=decision.why,
                            **({"remeasure_of": again.number} if again is not None else {}))
                elif not v.queued:
                    forced = None
                    if self.spec.search.sampler == "grid":
                        forced = next(iter(self.unvisited(v)), None)
                    elif self.answered >= MAX_REPEATED_PROPOSALS and self.configs is not None:
                        left = self.unvisited(v)
                        forced = self.rng.choice(left) if left else None
                    if forced is not None:
                        self.study.enqueue_trial(forced)
                    elif self.spec.search.sampler == "grid" or (
                            self.answered >= MAX_REPEATED_PROPOSALS and self.configs is not None):
                        if waiting:
                            return WAIT
                        self.exhausted = ("every configuration of the space has a result"
                                          + (" or failed in this run" if self.failed_here else ""))
                        return DONE
                    elif self.answered >= MAX_REPEATED_PROPOSALS:
                        self.exhausted = (f"the sampler proposed {self.answered} measured configurations "
                                          "in a row; the space looks exhausted")
                        return DONE
                event("ask_start")
                trial = self.study.ask()
                self.heartbeat(trial)
                if self.owner:
                    write(trial, orchestrator=self.owner)
                reached("after_ask")
                sampled = suggest(trial, self.plan)
                event("ask_end", trial.number)
                key = config_key(sampled)
                if key in v.results and TrialRecord.of(trial).remeasure_of is None:
                    self._answer_repeat(trial, v.results[key])
                    self._queue_neighbour(sampled, v.results[key].number, v)
                    continue
                busy = v.in_flight.get(key)
                if busy is not None or key in self.failed_here:
                    self._answer_deferred(trial, busy)
                    self._queue_neighbour(sampled, busy, v)
                    continue
                self.answered = 0
                proof = (predicted_oom(sampled, v.ooms, self.spec.search.memory_order)
                         if self.spec.search.skip_predicted_oom else None)
                return Proposal(trial, sampled, proof)
            return WAIT

    def _answer_repeat(self, trial: Any, original: Any) -> None:
        """The configuration has a result: Optuna gets the recorded answer, no process runs."""
        from optuna.trial import TrialState

        self.answered += 1
        write(trial, repeat_of=original.number, status=status_of(original))
        for k, val in original.constraints.items():
            trial.set_constraint(k, val)
        if original.state == TrialState.COMPLETE:
            self.study.tell(trial, original.values)
        else:
            self.study.tell(trial, state=original.state)
        self.on_answer(trial, Outcome(Status.REPEAT, f"same configuration as trial {original.number}; "
                                                "answered from the record, not run again"), original.number)

    def _answer_deferred(self, trial: Any, busy: int | None) -> None:
        """The configuration is being measured (or failed in this run): step aside."""
        from optuna.trial import TrialState

        self.answered += 1
        write(trial, status=Status.DEFERRED, deferred_to=busy if busy is not None else -1)
        if busy is not None:
            detail = f"same configuration as trial {busy}, which is running; not run twice"
        else:
            detail = "this configuration failed earlier in this run; it is retried on the next run"
        self.study.tell(trial, state=TrialState.FAIL)
        self.on_answer(trial, Outcome(Status.DEFERRED, detail), busy)

    def _queue_neighbour(self, proposed: dict[str, Any], original: int | None, v: View) -> None:
        """Queue the nearest configuration that has no result, is not in flight and is not
        predicted to run out of memory (``space.distance``: adjacent batch sizes are near, unlike
        in Optuna's categorical kernel)."""
        if (not self.neighbours or self.configs is None or self.spec.search.sampler not in MODEL_BASED
                or v.queued):
            return
        order, ooms = self.spec.search.memory_order, v.ooms
        left = [c for c in self.unvisited(v)
                if not (self.spec.search.skip_predicted_oom and predicted_oom(c, ooms, order) is not None)]
        chosen = nearest(proposed, left, self.plan, self.rng)
        if chosen is not None:
            enqueue(self.study, chosen, **({"neighbour_of": original} if original is not None else {}))
            v.queued.add(config_key(chosen))

    def failed(self, sampled: dict[str, Any]) -> None:
        """A configuration failed (status error) in this invocation: it is not tried again in it."""
        self.failed_here.add(config_key(sampled))

    def next_envs(self, n: int, env_of: Callable[[dict[str, Any]], dict[str, str]],
                  current: dict[str, str]) -> list[dict[str, str]]:
        """Environments the next ``n`` trials will probably need (for pre-started interpreters):
        the grid's next configurations; otherwise the current trial's (most sweeps set none)."""
        if self.spec.search.sampler != "grid" or self.configs is None:
            return [current]
        v = self.view()
        envs = [env_of(c) for c in self.unvisited(v)[:n]]
        return envs or [current]
