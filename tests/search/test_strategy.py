"""The ways of choosing the next configuration (``search/strategy.py``): each strategy's answer to a
view of the study, which one a spec gets, and the Optuna sampler its study is opened with."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest

from orchestrator.keys import config_key
from orchestrator.search.space import configurations, make_plan
from orchestrator.search.strategy import (MAX_REPEATED_PROPOSALS, SAMPLE, WAIT, Done, Grid, Planned, Proposal,
                                          Sampled, View, make_sampler, planned, strategy_for)
from orchestrator.spec.load import SweepSpec, check_spec
from orchestrator.store.record import write

CONFIGS = [{"batch_size": b} for b in (8, 16, 32)]


def _spec(space: dict[str, Any] | None = None, **search: Any) -> SweepSpec:
    return check_spec({"name": "s", "experiment": "experiments.mlp", "device": "cpu",
                       "space": space or {"batch_size": [8, 16, 32]},
                       "objective": {"metric": "samples_per_s", "direction": "maximize"},
                       "search": search}, Path("spec.yaml"), {})


def _view(measured: tuple[int, ...] = (), flying: tuple[int, ...] = (), failed: tuple[int, ...] = (),
          answered: int = 0) -> View:
    """A view in which the batch sizes ``measured`` have results (real finished trials, ok)."""
    study = optuna.create_study(direction="maximize")
    results = {}
    for b in measured:
        trial = study.ask({"batch_size": optuna.distributions.CategoricalDistribution([8, 16, 32])})
        write(trial, status="ok")
        study.tell(trial, float(b))
        results[config_key({"batch_size": b})] = study.trials[-1]
    return View(results, in_flight={config_key({"batch_size": b}): 99 for b in flying},
                failed={config_key({"batch_size": b}) for b in failed}, answered=answered)


@pytest.mark.parametrize("view, expected", [
    (_view(), Proposal({"batch_size": 8})),
    (_view(measured=(8,), flying=(16,)), Proposal({"batch_size": 32})),
    (_view(measured=(8, 16), flying=(32,)), WAIT),
    (_view(measured=(8, 16, 32)), Done("every configuration of the space has a result")),
    (_view(measured=(8, 16), failed=(32,)), Done("every configuration of the space has a result or failed in this run")),
])
def test_the_grid_runs_each_configuration_in_order(view: View, expected: object) -> None:
    assert Grid(CONFIGS).next(view) == expected


def test_a_sampler_samples_until_it_repeats_itself_then_forces_an_unmeasured_one() -> None:
    sampled = Sampled("tpe", CONFIGS, random.Random(0))
    assert sampled.next(_view(measured=(8,), answered=MAX_REPEATED_PROPOSALS - 1)) == SAMPLE
    forced = sampled.next(_view(measured=(8,), flying=(16,), answered=MAX_REPEATED_PROPOSALS))
    assert forced == Proposal({"batch_size": 32})  # the only one nobody measured or is measuring
    assert sampled.next(_view(measured=(8, 16), flying=(32,), answered=MAX_REPEATED_PROPOSALS)) == WAIT
    assert sampled.next(_view(measured=(8, 16, 32), answered=MAX_REPEATED_PROPOSALS)) == Done(
        "every configuration of the space has a result")


def test_a_sampler_over_a_continuous_space_ends_when_it_only_repeats_itself() -> None:
    sampled = Sampled("random", None, random.Random(0))
    assert sampled.next(_view(answered=3)) == SAMPLE
    assert sampled.next(_view(answered=MAX_REPEATED_PROPOSALS)) == Done(
        f"the sampler proposed {MAX_REPEATED_PROPOSALS} measured configurations in a row; the space looks exhausted")


@pytest.mark.parametrize("search, space, kind, label, refines", [
    ({}, None, Planned, "auto search", False),
    ({"sampler": "grid"}, None, Grid, "grid sampler", False),
    ({"sampler": "tpe"}, None, Sampled, "tpe sampler", True),
    ({"sampler": "nsga2"}, None, Sampled, "nsga2 sampler", True),
    ({"sampler": "random"}, None, Sampled, "random sampler", False),
    ({"n_trials": 4}, {"lr": {"low": 0.001, "high": 0.1}}, Sampled, "tpe sampler", True),  # continuous: no
    # planner, so TPE, named and run as sampler: tpe is (the run's header said "auto sampler" where the dry run said tpe)
])
def test_which_strategy_a_spec_gets(search: dict[str, Any], space: dict[str, Any] | None, kind: type,
                                    label: str, refines: bool) -> None:
    spec = _spec(space, **search)
    plan = make_plan(spec, "cpu")
    configs = configurations(plan) if plan.finite() else None
    strategy = strategy_for(spec, plan, configs, 3, random.Random(0))
    assert (type(strategy), strategy.label, strategy.refines) == (kind, label, refines)
    assert planned(spec) == (kind is Planned)


def test_the_auto_search_proposes_what_its_planner_decides_and_keeps_its_verdict() -> None:
    spec = _spec()
    plan = make_plan(spec, "cpu")
    strategy = strategy_for(spec, plan, configurations(plan), 3, random.Random(0))
    assert isinstance(strategy, Planned) and strategy.settles and strategy.verdict is None
    first = strategy.next(_view())
    assert isinstance(first, Proposal) and first.config in CONFIGS and first.attrs["chosen_by"]
    assert strategy.verdict is not None
    assert strategy.next(_view(measured=(8, 16), flying=(32,))) == WAIT  # nothing left but what flies


@pytest.mark.parametrize("search, expected", [
    ({"sampler": "tpe"}, optuna.samplers.TPESampler),
    ({"sampler": "nsga2"}, optuna.samplers.NSGAIISampler),
    ({"sampler": "random"}, optuna.samplers.RandomSampler),
    ({"sampler": "grid"}, optuna.samplers.RandomSampler),  # every trial is queued with all its parameters
    ({}, optuna.samplers.RandomSampler),                  # the auto search queues them too
])
def test_the_sampler_a_study_is_opened_with(search: dict[str, Any], expected: type) -> None:
    assert type(make_sampler(_spec(**search), 0)) is expected


def test_a_resumed_or_shared_study_s_sampler_is_seeded_apart() -> None:
    def first(n_existing: int, worker: int) -> float:
        study = optuna.create_study(sampler=make_sampler(_spec(sampler="random", seed=7), n_existing, worker))
        return study.ask().suggest_float("x", 0, 1)
    assert first(0, 0) == first(0, 0)
    assert len({first(0, 0), first(5, 0), first(0, 1)}) == 3
