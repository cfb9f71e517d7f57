"""The search benchmark's targets (issues #20 and #27), asserted on every recorded landscape with
a fixed small set of seeds: the replay is deterministic given its seeds, so this is the benchmark
itself, shortened (``bench/search_efficiency.py`` runs it with 100 seeds and prints the figures).

On each landscape, the shipped search (a spec's defaults: the auto search, ``stop: auto``), with
each measurement 2% noisy, is held to its group's targets (``TARGETS`` where the priors hold,
``CONTRADICTING`` where the landscape was recorded to contradict one), and ends itself with the
band measured in every seed.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from conftest import bench_module

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPES = sorted((ROOT / "bench" / "landscapes").glob("*.csv"))
SEEDS = range(3)


def bench() -> Any:
    return bench_module("search_efficiency")


def test_there_are_eight_landscapes_five_on_a_gpu() -> None:
    from orchestrator.replay.landscape import load_landscape

    devices = [load_landscape(p).device for p in LANDSCAPES]
    assert len(devices) >= 8 and sum(d == "cuda" for d in devices) >= 5


class Inline:
    """``run_landscape``'s pool, in this process: the replays are deterministic given their seeds."""

    @staticmethod
    def submit(fn: Any, *args: Any) -> Future:
        done: Future = Future()
        done.set_result(fn(*args))
        return done


@pytest.mark.parametrize("path", LANDSCAPES, ids=lambda p: p.stem)
def test_the_shipped_search_meets_its_targets(path: Path) -> None:
    """The benchmark's own checks (``check_targets``), on its own figures for three seeds: the
    landscapes where the priors hold, and the group recorded to contradict one of them."""
    b = bench()
    results, grid = b.run_landscape(path, SEEDS, 0.02, 0.02, Inline(), strategies={"shipped", "lightning"})
    checks = b.check_targets(path, results, grid)
    assert len(checks) >= 3
    failed = [text for text, ok in checks if not ok]
    known = KNOWN_SHORTFALLS.get(path.stem)
    if known is None:
        assert failed == []
    else:  # the one target missed, and only it: a fix (or a new miss) shows here
        assert len(failed) == 1 and known in failed[0], failed


KNOWN_SHORTFALLS: dict[str, str] = {
    "hf_gpt2_h100_cap012": "shipped stop_ratio",
    "hf_llama_compile_h100_cap010": "shipped ratio 0.",
}
"""Targets a landscape misses on these seeds, kept visible rather than tuned away (docs/benchmarks.md
says why). Issue #41's new H100 landscapes: GPT-2 under a 12% cap stops at 0.44x of the grid (target
0.40; the search as before issue #41: one slot decides as it did); the Llama with compile reaches the
band at 0.26x (target 0.15): its best, bfloat16 at batch 16, fits only compiled, and two compiled
trials (37 s and 40 s of the grid's 319 s) come before it. (Before issue #41 the Llama reached the
band at 0.13x, its bisection run compiled, and stopped at 0.48x, target 0.40.) The 1.8% 32-layer MLP
(``mlp_deep32_ckpt_h100_cap018``) missed "1.5x lightning" until issue #38."""


def test_a_landscape_that_contradicts_a_prior_is_held_to_its_own_targets() -> None:
    from orchestrator.replay.landscape import load_landscape

    contradicting = [p for p in LANDSCAPES if load_landscape(p).contradicts]
    assert len(contradicting) >= 3
    b = bench()
    results, grid = b.run_landscape(contradicting[0], range(1), 0.02, 0.02, Inline(),
                                    strategies={"shipped", "lightning"})
    texts = [text for text, _ in b.check_targets(contradicting[0], results, grid)]
    assert all(t.startswith("[contradicts] ") for t in texts)
    assert any(f"<= {b.CONTRADICTING['ratio']}" in t for t in texts)


@pytest.mark.parametrize("name", ["bert_tiny_cpu_rlimit_r3", "bert_base_seq512_h100_cap025"])
def test_at_30_percent_noise_the_stop_says_it_is_unsure(name: str) -> None:
    """Issue #38 (``search_efficiency.py --noise-levels`` prints the figures over 50 seeds): with
    each measurement 30% noisy, the stop says it could not tell its best from a rival."""
    levels = bench_module("noise_levels")
    path = ROOT / "bench" / "landscapes" / f"{name}.csv"
    for seed in SEEDS:
        _, unsure, _ = levels.replay_one(str(path), "0.30", seed, 0.02)
        assert unsure, (name, seed)


@pytest.mark.parametrize("name", ["bert_tiny_cpu_rlimit_r3", "bert_mini_seq128_h100"])
def test_at_10_percent_noise_an_answer_off_by_more_than_the_band_is_said(name: str) -> None:
    """Issue #38: where the answer is more than 2% off the best, the stop says it is unsure (on
    these two, every seed of 7000-7049 that was off said so; over all 19 landscapes, at most 4% of
    seeds did not: ``search_efficiency.py --noise-levels``)."""
    levels = bench_module("noise_levels")
    path = ROOT / "bench" / "landscapes" / f"{name}.csv"
    for seed in SEEDS:
        in_band, unsure, _ = levels.replay_one(str(path), "0.10", seed, 0.02)
        assert in_band or unsure, (name, seed)
