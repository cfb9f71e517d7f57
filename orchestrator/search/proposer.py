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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.search.dominance import predicted_oom
from orchestrator.faultpoints import reached
from orchestrator.outcome import Outcome, Status
from orchestrator.search.strategy import (MAX_REPEATED_PROPOSALS, SAMPLE, WAIT, Done, Proposal, Strategy, View,
                                          Wait, strategy_for, unvisited)
from orchestrator.search.verdict import Verdict
from orchestrator.store.record import RecordValues, TrialRecord, enqueue, is_attempt, status_of, write
from orchestrator.store.records import results_of
from orchestrator.search.space import Plan, config_key, configurations, nearest, suggest
from orchestrator.spec.load import SweepSpec
from orchestrator.timeline import event

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial, Trial
    from optuna.study import Study

    from orchestrator.store.coordination import ProposalLock


@dataclass
class Asked:
    """A trial asked of the study to run ``sampled``; ``predicted_by``: the trial whose OOM
    predicts this one's (``dominance``), when the spec skips predicted OOMs."""

    trial: Trial
    sampled: dict[str, Any]
    predicted_by: int | None = None
    swapped: bool = False
    """``predicted_by`` fit only by swapping (``swapped``), rather than running out of memory."""


class Proposer:
    def __init__(self, spec: SweepSpec, plan: Plan, study: Study, lock: ProposalLock,
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
        self.spec, self.plan, self.study, self.lock = spec, plan, study, lock
        self.on_answer, self.heartbeat, self.neighbours = on_answer, heartbeat, neighbours
        self.configs = configurations(plan) if plan.finite() else None
        target = spec.search.n_trials or (len(self.configs) if self.configs is not None else 0)
        self.target = min(target, len(self.configs)) if self.configs is not None else target
        self.rng = random.Random(spec.search.seed)
        self.strategy: Strategy = strategy_for(spec, plan, self.configs, self.target, self.rng,
                                               memory_limit_gib, native_half)
        self.strays: list[int] = []
        """The strays (``View.strays``) the last proposal saw: none once they are failed."""
        self.elsewhere: list[int] = []
        """The trials in flight (``View.in_flight``) the last proposal saw: where this sweep has
        none of its own running, other orchestrators' (the loop says so when it waits for them)."""
        self.answered = 0
        self.failed_here: set[str] = set()
        """Configurations that failed (status error) in this invocation: not tried again in it."""
        self.superseded = dict(superseded or {})
        self.owner = owner
        self.exhausted: str | None = None
        """Why nothing more is proposed, when the study does not have all its results."""

    @property
    def verdict(self) -> Verdict | None:
        """The strategy's last word on whether the search is done (the ``auto`` search's)."""
        return self.strategy.verdict

    # -- reading the study ----------------------------------------------------------------------
    def view(self) -> View:
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)  # incremental: Optuna caches finished trials
        results = {}
        for t in results_of(trials):
            key = config_key(t.params)
            if t.number >= self.superseded.get(key, -1):
                results[key] = t
        v = View(results, failed=self.failed_here, answered=self.answered)
        for t in trials:
            if t.state == TrialState.RUNNING and not t.params:
                if self.owner is not None:  # a server database's (see View)
                    v.strays.append(t.number)
            elif t.state == TrialState.RUNNING and is_attempt(t):
                v.in_flight.setdefault(config_key(t.params), t.number)
            elif t.state == TrialState.WAITING:
                v.queued.add(config_key(t.system_attrs.get("fixed_params") or {}))
        return v

    def _view_besides(self, number: int, key: str) -> View:
        """The study as it is now, but for trial ``number`` (just asked, for configuration ``key``):
        where the lock's session died while this orchestrator proposed (the database restarted),
        another one may have taken the lock meanwhile and started the same configuration, which the
        view read before did not show (two orchestrators measured one configuration twice across a
        restart of PostgreSQL)."""
        v = self.view()
        if v.in_flight.get(key) == number:  # ours: the other attempt, if any, is the one to defer to
            del v.in_flight[key]
            other = next((t.number for t in self.study.get_trials(deepcopy=False)
                          if t.number != number and t.state.name == "RUNNING" and is_attempt(t)
                          and config_key(t.params) == key), None)
            if other is not None:
                v.in_flight[key] = other
        return v

    # -- proposing ------------------------------------------------------------------------------
    def next(self) -> Asked | Wait | Done:
        """A trial to run, ``Wait`` (nothing now, but trials in flight may change that) or ``Done``
        (``self.exhausted`` says why, unless the study has all its results): the strategy's answer,
        once the budget and Optuna's queue have had their say. A proposal answered at once (a
        repeat, a deferral) is recorded, and the strategy asked again."""
        with self.lock:
            for _ in range(4 * MAX_REPEATED_PROPOSALS):
                retaken = self.lock.retaken
                v = self.view()
                self.strays, self.elsewhere = v.strays, sorted(v.in_flight.values())
                answer = self._before(v) or self.strategy.next(v)
                if isinstance(answer, Done) and answer.reason is not None:
                    self.exhausted = answer.reason
                if not isinstance(answer, Proposal):
                    return answer
                if answer.config is not None:
                    enqueue(self.study, answer.config, **answer.attrs)
                trial, sampled = self._ask()
                self.lock.confirm()  # a lock lost unseen (the database restarted between calls) is taken again
                if self.lock.retaken != retaken:  # the lock was lost meanwhile: look again
                    v = self._view_besides(trial.number, config_key(sampled))
                if self._answered_at_once(trial, sampled, v):
                    continue
                self.answered = 0
                proof = (predicted_oom(sampled, v.ooms, self.spec.search.memory_order)
                         if self.spec.search.skip_predicted_oom else None)
                return Asked(trial, sampled, proof, any(t.number == proof and status_of(t) == Status.SWAPPED
                                                        for t in v.results.values()))
            return WAIT

    def _before(self, v: View) -> Proposal | Wait | Done | None:
        """What comes before the strategy: the budget (``target`` results, or the rest in flight;
        a settling search may go on measuring its leaders again), then Optuna's queue."""
        if len(v.results) >= self.target and not self.strategy.settles:
            return WAIT if v.strays else Done()
        if len(v.results) + len(v.in_flight) >= self.target and not self.strategy.settles:
            return WAIT  # the rest of the budget is in flight
        return SAMPLE if v.queued else None  # the queue's next runs first

    def _ask(self) -> tuple[Any, dict[str, Any]]:
        """A new trial from the study (the queue's next, else the sampler's) and its configuration."""
        event("ask_start")
        trial = self.study.ask()
        self.heartbeat(trial)
        if self.owner:
            write(trial, orchestrator=self.owner)
        reached("after_ask")
        sampled = suggest(trial, self.plan)
        event("ask_end", trial.number)
        return trial, sampled

    def _answered_at_once(self, trial: FrozenTrial, sampled: dict[str, Any], v: View) -> bool:
        """A configuration that has a result (unless measured again on purpose), is in flight or
        failed here is answered without a process, and its nearest free neighbour queued."""
        key = config_key(sampled)
        if key in v.results and TrialRecord.of(trial).remeasure_of is None:
            self._answer_repeat(trial, v.results[key])
            self._queue_neighbour(sampled, v.results[key].number, v)
            return True
        busy = v.in_flight.get(key)
        if busy is not None or key in self.failed_here:
            self._answer_deferred(trial, busy)
            self._queue_neighbour(sampled, busy, v)
            return True
        return False

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
        if not self.neighbours or self.configs is None or not self.strategy.refines or v.queued:
            return
        order, ooms = self.spec.search.memory_order, v.ooms
        left = [c for c in unvisited(self.configs, v)
                if not (self.spec.search.skip_predicted_oom and predicted_oom(c, ooms, order) is not None)]
        chosen = nearest(proposed, left, self.plan, self.rng)
        if chosen is not None:
            near: RecordValues = {"neighbour_of": original} if original is not None else {}
            enqueue(self.study, chosen, **near)
            v.queued.add(config_key(chosen))

    def failed(self, sampled: dict[str, Any]) -> None:
        """A configuration failed (status error) in this invocation: it is not tried again in it."""
        self.failed_here.add(config_key(sampled))

    def next_envs(self, n: int, env_of: Callable[[dict[str, Any]], dict[str, str]],
                  current: dict[str, str]) -> list[dict[str, str]]:
        """Environments the next ``n`` trials will probably need (the processes the slot prepares ahead, ``launch/spares.py``):
        the grid's next configurations; otherwise the current trial's (most sweeps set none)."""
        if self.spec.search.sampler != "grid" or self.configs is None:
            return [current]
        v = self.view()
        envs = [env_of(c) for c in unvisited(self.configs, v)[:n]]
        return envs or [current]
