"""How the next configuration is chosen: one small class per way of choosing, behind one interface.

``Strategy.next(view)`` reads the study as one read saw it (``View``) and answers:

- ``Proposal``: run this configuration (``config``, queued in Optuna with the attributes saying
  why), or, with no ``config``, the one Optuna's sampler samples as the trial is asked;
- ``Wait``: nothing now, but the trials in flight may change that;
- ``Done``: nothing more (``reason``: why, where the study does not have all its results).

The strategies are the ``auto`` search (``Planned``: ``planner.Planner`` decides), the grid
(``Grid``: every configuration in order) and Optuna's samplers (``Sampled``: TPE, NSGA-II,
random; after ``MAX_REPEATED_PROPOSALS`` answered proposals in a row, one configuration nobody has
measured is forced). ``strategy_for`` picks one for a spec; ``make_sampler`` builds the Optuna
sampler the study is opened with. ``proposer.Proposer`` asks the strategy and records what it gets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.outcome import MEMORY_BOUNDARY
from orchestrator.keys import config_key
from orchestrator.search.planners import planner_for
from orchestrator.search.verdict import Verdict
from orchestrator.spec.load import Range, SweepSpec
from orchestrator.store.record import status_of

if TYPE_CHECKING:
    from orchestrator.search.planner import Planner
    from orchestrator.search.space import Plan

MAX_REPEATED_PROPOSALS = 10  # answered proposals in a row before one is forced (or the space is done)
MODEL_BASED = ("tpe", "nsga2")  # samplers whose re-proposal of a measured point means "exploit it"


@dataclass
class View:
    """The study as one read sees it, and what this invocation adds to it."""

    results: dict[str, Any] = field(default_factory=dict)
    """Config key -> the trial holding its result."""
    in_flight: dict[str, int] = field(default_factory=dict)
    """Config key -> number of a RUNNING trial measuring it (any orchestrator)."""
    queued: set[str] = field(default_factory=set)
    """Config keys waiting in Optuna's queue."""
    strays: list[int] = field(default_factory=list)
    """RUNNING trials without parameters, counted where several orchestrators share the study.
    Seen under the study's lock, none is being proposed: each was asked by an orchestrator that
    died, or lost its connection, before writing them. The stale-trial check fails them (after a
    grace period, later after an outage); on a server database the sweep waits for that rather
    than end with a trial left RUNNING."""
    failed: set[str] = field(default_factory=set)
    """Config keys that failed (status error) in this invocation: not tried again in it."""
    answered: int = 0
    """Proposals answered in a row without a process (repeats, deferrals)."""

    @property
    def waiting(self) -> bool:
        """Whether trials in flight (or strays) may still change the answer."""
        return bool(self.in_flight or self.strays)

    @property
    def ooms(self) -> list[tuple[int, dict[str, Any]]]:
        """Configurations that ran out of memory (or swapped): the evidence for predicted OOMs."""
        return sorted((t.number, t.params) for t in self.results.values()
                      if status_of(t) in MEMORY_BOUNDARY)


@dataclass(frozen=True)
class Proposal:
    """Run ``config`` (queued with the trial attributes ``attrs``: ``record.write``'s names), or,
    with ``config`` None, what the study's sampler samples."""

    config: dict[str, Any] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Wait:
    """Nothing to run now; the trials in flight may change that."""


@dataclass(frozen=True)
class Done:
    """Nothing more to run. ``reason``: why, where the study does not have all its results."""

    reason: str | None = None


SAMPLE, WAIT = Proposal(), Wait()


def unvisited(configs: list[dict[str, Any]] | None, view: View) -> list[dict[str, Any]]:
    """Configurations of a finite space nobody has measured, is measuring, or failed here."""
    assert configs is not None
    return [c for c in configs if (k := config_key(c)) not in view.results
            and k not in view.in_flight and k not in view.failed]


def _all_measured(view: View) -> str:
    return "every configuration of the space has a result" + (" or failed in this run" if view.failed else "")


class Strategy:
    """One way of choosing the next configuration."""

    label = "search"
    """How the start-up line names it."""
    settles = False
    """Whether it may go on once every configuration has a result (measuring its leaders again)."""
    refines = False
    """Whether a re-proposed configuration's nearest unmeasured neighbour is queued (a
    model-based sampler: its re-proposal of a measured point means "exploit it")."""
    verdict: Verdict | None = None
    """The last word on whether the search is done, where the strategy judges that."""

    def next(self, view: View) -> Proposal | Wait | Done:
        raise NotImplementedError


class Planned(Strategy):
    """The ``auto`` search: the planner decides from the results (``planner.Planner.decide``)."""

    label = "auto search"

    def __init__(self, planner: Planner, target: int, n_configs: int, stop: bool) -> None:
        self.planner, self.target, self.stop = planner, target, stop
        self.settles = target == n_configs  # unless n_trials said how many to run
        self.verdict = None

    def next(self, view: View) -> Proposal | Wait | Done:
        decision = self.planner.decide(view.results, set(view.in_flight), stop=self.stop, running=len(view.in_flight),
                                       failed=view.failed)
        self.verdict = decision.verdict
        if decision.config is None:
            if view.waiting and not (decision.verdict.ends_running and not view.strays):
                return WAIT  # their results may change the verdict (unless it ends them: ``flight``)
            unfinished = len(view.results) < self.target or decision.verdict.unsure  # else: as without a search
            return Done(decision.verdict.reason if unfinished else None)
        again = view.results.get(config_key(decision.config)) if decision.why == "remeasure" else None
        return Proposal(decision.config, {"chosen_by": decision.why,
                                          **({"remeasure_of": again.number} if again is not None else {})})


class Grid(Strategy):
    """Every configuration of the space, in the spec's order."""

    label = "grid sampler"

    def __init__(self, configs: list[dict[str, Any]] | None) -> None:
        self.configs = configs

    def next(self, view: View) -> Proposal | Wait | Done:
        forced = next(iter(unvisited(self.configs, view)), None)
        if forced is not None:
            return Proposal(forced)
        return WAIT if view.waiting else Done(_all_measured(view))


class Sampled(Strategy):
    """An Optuna sampler chooses; after ``MAX_REPEATED_PROPOSALS`` answered proposals in a row, a
    random configuration nobody has measured (a finite space), or the end (a continuous one)."""

    def __init__(self, name: str, configs: list[dict[str, Any]] | None, rng: random.Random) -> None:
        self.label, self.configs, self.rng = f"{name} sampler", configs, rng
        self.refines = name in MODEL_BASED

    def next(self, view: View) -> Proposal | Wait | Done:
        if view.answered < MAX_REPEATED_PROPOSALS:
            return SAMPLE
        if self.configs is None:
            return Done(f"the sampler proposed {view.answered} measured configurations in a row; "
                        "the space looks exhausted")
        left = unvisited(self.configs, view)
        if left:
            return Proposal(self.rng.choice(left))
        return WAIT if view.waiting else Done(_all_measured(view))


def planned(spec: SweepSpec) -> bool:
    """Whether the ``auto`` search (``planner``) chooses the trials: a finite space, one objective."""
    return (spec.search.sampler == "auto" and len(spec.objective.metrics) == 1
            and not any(isinstance(d, Range) and d.step is None for d in spec.space.values()))


def sampler_name(spec: SweepSpec) -> str:
    """The spec's sampler as it runs: ``auto`` is TPE where the planner does not apply (a
    continuous space, several objectives)."""
    return "tpe" if spec.search.sampler == "auto" and not planned(spec) else spec.search.sampler


def strategy_for(spec: SweepSpec, plan: Plan, configs: list[dict[str, Any]] | None, target: int,
                 rng: random.Random, memory_limit_gib: float | None = None,
                 native_half: frozenset[str] | None = None) -> Strategy:
    """The spec's way of choosing over ``configs`` (the plan's; None: a continuous space) toward
    ``target`` results; ``rng``: the forced choices' (shared with the proposer's neighbours);
    ``memory_limit_gib`` and ``native_half``: what the planner's priors read (``Planner``)."""
    if planned(spec) and configs:
        (metric, direction), = spec.objective.metrics
        planner = planner_for(configs, plan.searched, metric, direction, plan.device, spec.search.memory_order,
                              spec.search.band, memory_limit_gib, native_half, again=spec.trial.repeats == "auto",
                              steps=spec.trial.warmup_steps + spec.trial.measure_steps)
        return Planned(planner, target, len(configs), spec.search.stop == "auto")
    if spec.search.sampler == "grid":
        return Grid(configs)
    return Sampled(sampler_name(spec), configs, rng)


def make_sampler(spec: SweepSpec, n_existing: int, worker: int = 0) -> Any:
    """Optuna's sampler for the spec; samplers are not stored by Optuna: rebuilt on every run. The
    seed is offset by the number of trials already in the study, so a resume does not replay the
    first proposals, and by ``worker`` (a per-process number when several orchestrators share a
    study: same-seed workers that start together would otherwise propose the same points,
    optuna#3790). The grid and the ``auto`` search queue every trial they run with all its
    parameters: their study gets Optuna's ``RandomSampler``, whose samples those replace."""
    import optuna

    seed = None if spec.search.seed is None else (spec.search.seed + 7919 * n_existing + 104729 * worker) % 2**32
    name = sampler_name(spec)
    if name == "tpe":
        # 5 random start-up trials instead of Optuna's 10: memory sweeps are small (tens of
        # configurations), and on both recorded landscapes this reached the best configuration
        # sooner for every seed set tried (bench/search_efficiency.py --startup 5 10).
        # constant_liar (Optuna 5's default, said here on purpose): trials in flight count as
        # bad, so concurrent proposals (several slots or orchestrators) spread out.
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5, constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)
