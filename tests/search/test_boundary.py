"""The auto search's first trials (``search/boundary``): the column the priors rank first, bisected
to its memory boundary. The planner's own tests (``test_planner``) check the decisions it makes
from them; these check the column and the bisection's steps directly."""

from __future__ import annotations

import itertools

import numpy as np

from orchestrator.search.dominance import DEFAULT_ORDER
from orchestrator.search.planner import Planner
from orchestrator.search.space import config_key

SPACE = [dict(zip(("batch_size", "dtype", "grad_accum_steps"), c))
         for c in itertools.product((16, 32, 64, 128, 256), ("float32", "bfloat16"), (1, 2))]


def boundary(device: str = "cuda"):  # noqa: ANN201 - the planner's own Boundary
    return Planner(SPACE, {}, "samples_per_s", "maximize", device, dict(DEFAULT_ORDER)).boundary


def test_the_column_is_the_priors_first_with_least_memory_sorted_by_batch() -> None:
    b = boundary()
    column = [SPACE[i] for i in b.column()]
    assert [c["batch_size"] for c in column] == [16, 32, 64, 128, 256]
    assert {(c["dtype"], c["grad_accum_steps"]) for c in column} == {("bfloat16", 1)}


def test_the_bisection_halves_what_is_open_and_waits_for_the_column_in_flight() -> None:
    b = boundary()
    column = b.column()
    p_fit = np.full(len(SPACE), 0.5)
    assert SPACE[b.probe(p_fit, {}, set())]["batch_size"] == 64            # the middle first
    p_fit[column[2]] = 1.0                                                  # 64 fits
    results = {config_key(SPACE[column[2]]): object()}
    assert SPACE[b.probe(p_fit, results, set())]["batch_size"] == 256      # the middle of what is above
    p_fit[column[4]] = 0.0                                                  # 256 does not
    results[config_key(SPACE[column[4]])] = object()
    assert SPACE[b.probe(p_fit, results, set())]["batch_size"] == 128
    assert b.probe(p_fit, results, {config_key(SPACE[column[3]])}) is None  # in flight: wait
    p_fit[column[3]] = 1.0
    results[config_key(SPACE[column[3]])] = object()
    assert b.probe(p_fit, results, set()) is None                           # 128 fits, 256 not: found


def test_on_a_cpu_the_batch_below_the_first_comes_next() -> None:
    b = boundary("cpu")
    column = b.column()
    p_fit = np.full(len(SPACE), 0.5)
    first = b.probe(p_fit, {}, set())
    p_fit[first] = 1.0
    assert SPACE[b.probe(p_fit, {config_key(SPACE[first]): object()}, set())]["batch_size"] == \
        SPACE[first]["batch_size"] // 2
    assert first in column
