"""The line printed per trial (``report/summary.trial_line``): what it adds beside the figures."""

from __future__ import annotations

from orchestrator.report.summary import trial_line


def test_a_compiled_trial_s_line_says_how_long_it_compiled_apart_from_its_figures() -> None:
    metrics = {"samples_per_s": 2500.0, "peak_memory_gib": 12.0, "compile_s": 28.14, "startup_s": 31.0}
    line = trial_line(3, {"batch_size": 64, "compile": True}, "ok", metrics, 35.2)
    assert line.endswith("(compiled in 28.1 s)"), line
    assert "compiled" not in trial_line(4, {"batch_size": 64}, "ok", {"samples_per_s": 1.0}, 3.0)
