"""What a sweep says about its noise (``report/noise``, issue #38): the one line when a measurement's
spread is wider than ``search.band``, with the figure, the load and what to do; the report's
spread column and its lines on the machine's load; the throughput plot's error bars. The rules are
tested on records; one real sweep checks that the command prints the line."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import command, load_study, orchestrate, write_spec
from orchestrator.report import noise
from orchestrator.report.plotdata import choose_layout, interval, throughput_intervals
from orchestrator.spec.load import check_spec


def spec(**trial: Any) -> Any:
    data = {"name": "n", "experiment": "experiments.mlp", "space": {"batch_size": [8, 16]},
            "trial": {"min_measure_s": 1.0, **trial}}
    return check_spec(data, Path("n.yaml"), {})


def result(ci: float | None, processes: int = 1, value: float = 100.0, batch: int = 8) -> Any:
    metrics = {"samples_per_s": value}
    if ci is not None:
        metrics["throughput_ci95"] = ci
    attrs = {"status": "ok", "metrics": metrics, **({"processes": processes} if processes > 1 else {})}
    return SimpleNamespace(user_attrs=attrs, params={"batch_size": batch}, number=batch,
                           state=SimpleNamespace(name="COMPLETE", is_finished=lambda: True), values=[value])


def test_one_measurements_spread_is_the_median_over_trials_each_back_to_one_process() -> None:
    trials = [result(0.04), result(0.10), result(0.05, processes=4), result(None)]
    assert noise.one_measurement(trials) == (pytest.approx(0.10), 3)   # 0.04, 0.10 and 0.05 * 2
    assert noise.one_measurement([result(None)]) == (None, 0)


def test_no_line_while_a_measurement_is_within_the_band() -> None:
    assert noise.noise_line(spec(), [result(0.015), result(0.019)]) is None
    assert noise.noise_line(spec(), [result(None)]) is None


@pytest.mark.parametrize("trial, advice", [
    ({}, "trial.repeats: 3; auto, the default, measured only close leaders again"),
    ({"repeats": 1}, "trial.repeats: 1 -> 3"),
    ({"repeats": 3}, "trial.repeats: 3 -> 6")])  # a busy machine's tour: "auto, or more than 3" (auto measures less)
def test_the_line_gives_the_figure_the_load_and_what_to_do(trial: dict[str, Any], advice: str) -> None:
    load = {"before": 5.8, "during": {"min": 5.9, "median": 6.4, "max": 8.3}, "cores": 2}
    line = noise.noise_line(spec(**trial), [result(0.10), result(0.12), result(0.30)], load)
    assert line is not None and "\n" not in line
    for part in ("Noise: one measurement of the throughput is within +-12.0% at 95% here (median of 3 trials)",
                 "wider than the 2% the answer is meant to be within (search.band)",
                 "load 5.8 before the sweep, 5.9-8.3 (median 6.4) during it, on 2 cores",
                 "quieter machine", "trial.min_measure_s: 1 -> 4", advice):
        assert part in line, (part, line)


def test_measuring_longer_is_advised_from_the_windows_measured() -> None:
    """A busy machine's tour: "trial.min_measure_s: 0.5 -> 4" over windows that slow steps already
    held for 5-20 s (median 10.5): applied, it changed nothing."""
    slow = [result(0.2), result(0.3), result(0.25)]
    for t, window in zip(slow, (5.4, 10.5, 20.3)):
        t.user_attrs["metrics"]["measure_s"] = window
    line = noise.noise_line(spec(min_measure_s=0.5), slow)
    assert line is not None and "measure longer (trial.min_measure_s: 0.5 -> 42; the windows already last 10.5 s)" \
        in line, line
    for t in slow:  # windows as long as asked: nothing to say of them
        t.user_attrs["metrics"]["measure_s"] = 0.52
    line = noise.noise_line(spec(min_measure_s=0.5), slow)
    assert line is not None and "measure longer (trial.min_measure_s: 0.5 -> 4)" in line, line


def test_the_report_lists_each_runs_load() -> None:
    assert noise.load_lines(None) == []
    lines = noise.load_lines([{"at": 0.0, "before": 1.3, "cores": 2}, {"before": 6.8, "cores": 2}])
    assert lines[0].startswith("Machine load") and len(lines) == 3 and "load 6.8 before the sweep" in lines[2]


def test_a_points_error_bar_is_its_95_percent_interval_on_the_log_scale() -> None:
    t = result(0.1, value=200.0)
    low, high = interval(t)
    assert (low, high) == (pytest.approx(200 * math.exp(-0.1)), pytest.approx(200 * math.exp(0.1)))
    assert interval(result(None)) is None
    trials = [t, result(0.2, value=300.0, batch=16)]
    bars = throughput_intervals(trials, choose_layout(trials))
    assert [x for x, _, _ in bars["all"]] == [8, 16]


@pytest.mark.slow
def test_a_sweep_noisier_than_its_band_says_so_and_its_report_shows_the_spread_and_load(project: Path) -> None:
    """A real sweep whose band (0.1%) no measurement on a CPU meets: the noise line, each trial's
    interval, the load kept with the study and shown by the report."""
    path = write_spec(project, """
        name: noisy
        experiment: experiments.faults
        device: cpu
        fixed: {fault: none}
        space:
          batch_size: [2, 4]
        search: {sampler: grid, band: 0.001}
        trial: {warmup_steps: 1, measure_steps: 10, min_measure_s: 0.05, timeout_s: 60}
        """)
    proc = orchestrate([str(path)], project)
    assert proc.returncode == 0, proc.stderr
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Noise: ")), None)
    assert line is not None, proc.stdout
    assert "wider than the 0.1% the answer is meant to be within" in line and "the machine's load" in line and "at 95%" in line
    assert "at 95%)" in proc.stdout.splitlines()[1]                  # the first trial's line has its interval
    study = load_study(project, "noisy")
    runs = study.user_attrs["orchestrate.load"]
    assert len(runs) == 1 and runs[0]["readings"] == 2 and runs[0]["cores"]
    report = command(["report", str(path)], project)
    assert report.returncode == 0, report.stderr
    assert "+-95%" in report.stdout and "Machine load (1-minute load average" in report.stdout
    assert "Noise: one measurement" in report.stdout
