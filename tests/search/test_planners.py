"""A resumed study's command builds its planner once (``planners.planner_for``): the question
"is the search done?" keeps it, and the sweep takes it over; nothing else is shared."""

from __future__ import annotations

from orchestrator.search.planners import planner_for

CONFIGS = [{"batch_size": b, "dtype": d} for d in ("float32", "bfloat16") for b in (8, 16, 32)]
ARGS = ({}, "samples_per_s", "maximize", "cpu", {"batch_size": "increasing"})


def test_a_kept_planner_is_taken_over_once_and_others_are_new() -> None:
    kept = planner_for(CONFIGS, *ARGS, keep=True)
    assert planner_for(CONFIGS, *ARGS) is kept  # the sweep takes it over
    assert planner_for(CONFIGS, *ARGS) is not kept  # once: a second sweep gets its own
    other = planner_for(CONFIGS, *ARGS, 0.05, keep=True)  # another band: another planner
    assert other is not kept and planner_for(CONFIGS, *ARGS) is not other
    first, second = planner_for(CONFIGS, *ARGS), planner_for(CONFIGS, *ARGS)
    assert first is not second  # without keep, nothing is shared (replays run many sweeps)
