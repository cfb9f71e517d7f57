"""The line printed per trial (``report/summary.trial_line``): what it adds beside the figures."""

from __future__ import annotations

from orchestrator.report.summary import trial_line


def test_a_compiled_trial_s_line_says_how_long_it_compiled_apart_from_its_figures() -> None:
    metrics = {"samples_per_s": 2500.0, "peak_memory_gib": 12.0, "compile_s": 28.14, "startup_s": 31.0}
    line = trial_line(3, {"batch_size": 64, "compile": True}, "ok", metrics, 35.2)
    assert line.endswith("(compiled in 28.1 s)"), line
    assert "compiled" not in trial_line(4, {"batch_size": 64}, "ok", {"samples_per_s": 1.0}, 3.0)


def test_the_best_table_s_figures_line_up_however_long_the_parameters() -> None:
    """The tour's four (five knobs) and script/long.yaml: the parameters column was 60 wide, and
    the figures after a longer parameter list moved right, row by row."""
    from types import SimpleNamespace

    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from orchestrator.report.summary import best_table

    def trial(number: int, params: dict, sps: float) -> object:
        t = create_trial(params=params, distributions={k: CategoricalDistribution([v]) for k, v in params.items()},
                         value=sps, user_attrs={"status": "ok", "metrics": {"samples_per_s": sps, "peak_memory_gib": 0.24,
                                                                             "throughput_ci95": 0.9}})
        t.number = number
        return t

    best = [trial(33, {"batch_size": 256, "dtype": "float32", "hidden_size": 32, "num_layers": 1, "optimizer": "adamw"}, 273782.19),
            trial(32, {"batch_size": 256, "dtype": "float32", "hidden_size": 32, "num_layers": 1, "optimizer": "sgd"}, 266400.48),
            trial(5, {"batch_size": 256, "data_augmentation_pipeline_variant_identifier": "none"}, 27466.9),
            trial(6, {"batch_size": 8}, 13990.43)]
    spec = SimpleNamespace(objective=SimpleNamespace(metrics=[("samples_per_s", "maximize")]))
    rows = best_table(spec, best)  # type: ignore[arg-type]
    assert len({len(row) for row in rows}) == 1, "\n".join(rows)  # every column at the same place in each row
    assert all(row.rstrip().endswith(("x/2.5      0.24", "peak GiB")) for row in rows), "\n".join(rows)


def test_a_pareto_table_shows_peak_memory_once_and_throughput_to_one_decimal() -> None:
    """The tour's multi (samples_per_s up, peak_memory_gib down): the front's table printed the
    peak twice (as the objective and again as its own column) and the throughput to 2 decimals."""
    from types import SimpleNamespace

    from optuna.distributions import CategoricalDistribution
    from optuna.trial import create_trial

    from orchestrator.report.summary import best_table

    t = create_trial(params={"batch_size": 64}, distributions={"batch_size": CategoricalDistribution([64])},
                     values=[1234.567, 0.4567], user_attrs={"status": "ok", "metrics": {
                         "samples_per_s": 1234.567, "peak_memory_gib": 0.4567}})
    spec = SimpleNamespace(objective=SimpleNamespace(metrics=[("samples_per_s", "maximize"), ("peak_memory_gib", "minimize")]))
    header, row = best_table(spec, [t])  # type: ignore[arg-type]
    assert header.split()[-3:] == ["samples_per_s", "peak_memory_gib", "+-95%"], header
    assert row.split()[-3:] == ["1,234.6", "0.46", "-"], row


def test_a_sweep_s_lines_are_as_wide_as_its_longest_configuration() -> None:
    """A tour: every trial line left 60 characters for its parameters, so two short knobs stood
    34 spaces from their status, and longer ones pushed the figures out of line."""
    from orchestrator.report.summary import params_width
    from orchestrator.spec.model import Choice, Range

    space = {"batch_size": Choice((8, 128)), "dtype": Choice(("float32", "bfloat16"))}
    width = params_width(space)
    assert width == len("batch_size=128 dtype=bfloat16")
    lines = [trial_line(n, {"batch_size": b, "dtype": d}, "ok", {"samples_per_s": 10.0}, 1.0, width=width)
             for n, (b, d) in enumerate([(8, "float32"), (128, "bfloat16")])]
    assert lines[1].startswith("#1   batch_size=128 dtype=bfloat16 ok ")
    assert len({line.index(" ok ") for line in lines}) == 1  # the figures line up
    assert params_width({"lr": Range(1e-5, 1e-2, log=True)}) == len("lr=") + 12
    assert params_width({"layers": Range(1, 48, integer=True)}) == 10  # at least 10


def test_the_best_s_throughput_is_the_objective_s_first(tmp_path) -> None:  # noqa: ANN001
    """An experiment tour: a sweep ranked by tokens_per_s said its best in samples/s alone (822
    against 52,609 tokens/s), in the Best line and in `best`."""
    from orchestrator.report.summary import throughput_text
    from orchestrator.spec.load import load_spec

    (tmp_path / "s.yaml").write_text("name: t\nexperiment: experiments.bert\nspace:\n  batch_size: [8]\n"
                                     "objective:\n  metric: tokens_per_s\n  direction: maximize\n")
    (tmp_path / "p.yaml").write_text("name: p\nexperiment: experiments.bert\nspace:\n  batch_size: [8]\n")
    m = {"samples_per_s": 822.0, "tokens_per_s": 52609.25}
    assert throughput_text(load_spec(tmp_path / "s.yaml"), m) == "52,609.2 tokens/s (822.0 samples/s)"
    assert throughput_text(load_spec(tmp_path / "p.yaml"), m) == "822.0 samples/s"


def test_a_swept_seq_len_under_samples_per_s_is_said(tmp_path) -> None:  # noqa: ANN001
    """An experiment tour: sweeping seq_len ranked by samples_per_s always picks the shortest, and
    nothing said so; the plan and the sweep's header now point at tokens_per_s."""
    from orchestrator.report.summary import objective_note
    from orchestrator.spec.load import load_spec

    base = "name: t\nexperiment: experiments.bert\nspace:\n  batch_size: [8]\n"
    (tmp_path / "a.yaml").write_text(base + "  seq_len: [16, 64]\n")
    (tmp_path / "b.yaml").write_text(base + "  seq_len: [16, 64]\nobjective: {metric: tokens_per_s, direction: maximize}\n")
    (tmp_path / "c.yaml").write_text(base + "  seq_len: [16]\n")
    assert objective_note(load_spec(tmp_path / "a.yaml")) == (
        "seq_len is swept and the objective is samples_per_s, by which the shortest sequence wins whatever else it "
        "does; to rank the lengths by the tokens they train, set objective: {metric: tokens_per_s}")
    assert objective_note(load_spec(tmp_path / "b.yaml")) is None and objective_note(load_spec(tmp_path / "c.yaml")) is None
