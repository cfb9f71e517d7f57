"""A replayed measurement's noise (``replay/noise``): constant or drifting, seeded, and reported
by the trial as a real one reports its spread."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from orchestrator.replay.noise import Noise, measure, parse


def test_no_noise_is_the_recorded_value_and_no_spread() -> None:
    assert measure(123.0, Noise(), 5.0, random.Random(0)) == {"samples_per_s": 123.0}


def test_a_constant_cv_spreads_the_log_by_it_and_the_trial_reports_about_as_much() -> None:
    rng = random.Random(1)
    draws = [measure(100.0, Noise(0.10), 0.0, rng) for _ in range(4000)]
    logs = [math.log(d["samples_per_s"] / 100.0) for d in draws]
    assert statistics.pstdev(logs) == pytest.approx(0.10, rel=0.05) and abs(statistics.fmean(logs)) < 0.01
    reported = [d["throughput_ci95"] / 1.96 for d in draws]
    assert statistics.median(reported) == pytest.approx(0.10, rel=0.15)   # an estimate from five parts
    assert min(reported) < 0.05 < 0.15 < max(reported)                   # ... and a noisy one


def test_a_drifting_cv_grows_and_the_throughput_falls_until_over_s_then_stays() -> None:
    drift = Noise(0.02, 0.20, 0.10, over_s=100.0)
    assert drift.at(0.0) == (0.02, 1.0)
    assert drift.at(50.0) == (pytest.approx(0.11), pytest.approx(0.95))
    assert drift.at(100.0) == drift.at(500.0) == (pytest.approx(0.20), pytest.approx(0.90))


@pytest.mark.parametrize("text, want", [("0.1", Noise(0.1)), ("drift:0.02-0.2,slow0.1", Noise(0.02, 0.2, 0.1, 60.0)),
                                         ("drift:0.02-0.3", Noise(0.02, 0.3, 0.0, 60.0))])
def test_a_level_is_written_as_a_cv_or_a_drift(text: str, want: Noise) -> None:
    assert parse(text, over_s=60.0) == want
