"""Good specs load into the values the rest of the orchestrator reads (bad ones: test_bad_input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.errors import SpecError
from orchestrator.spec.load import (DEFAULT_STORAGE, DEFAULT_TRACKING_URI, Choice, Constraint, Range,
                               SearchSettings, TrialSettings, load_spec, show)

HEAD = "name: t\nexperiment: experiments.faults\n"
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))


def load(tmp_path: Path, text: str, overrides: dict | None = None):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec(path, overrides)


def test_there_are_shipped_specs() -> None:
    assert {p.name for p in SHIPPED} >= {"bert_memory.yaml", "bert_tiny.yaml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_spec_loads(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem
    assert spec.space


def test_bert_memory_space() -> None:
    spec = load_spec(ROOT / "sweeps" / "bert_memory.yaml")
    assert list(spec.space) == ["batch_size", "dtype", "grad_accum_steps", "mps_high_watermark_ratio"]
    assert spec.space["batch_size"] == Choice((8, 16, 32, 64, 128, 256))
    assert spec.space["mps_high_watermark_ratio"] == Choice((1.0, 1.4, 1.7))
    assert spec.fixed == {"model": "bert-base", "seq_len": 128}
    assert spec.search.n_trials == 40 and spec.search.sampler == "auto" and spec.search.seed == 0
    assert spec.line_of("space", "batch_size") == 16  # line 1 is the editor's schema modeline


@pytest.mark.parametrize("text, expected", [
    ("hidden_size: {low: 8, high: 64}", Range(8, 64, integer=True)),
    ("hidden_size: {low: 8, high: 64, step: 8}", Range(8, 64, step=8, integer=True)),
    ("hidden_size: {low: 8, high: 8}", Range(8, 8, integer=True)),
    ("batch_size: {low: 1, high: 256, log: true}", Range(1, 256, log=True, integer=True)),
    ("scale: {low: 0.5, high: 2}", Range(0.5, 2.0)),
    ("scale: {low: 0, high: 1, step: 0.1}", Range(0.0, 1.0, step=0.1)),
    ("lr: {low: 1, high: 2}", Range(1.0, 2.0)),  # a float knob: int bounds make a float range
    ("lr: {low: 0.00001, high: 0.1, log: true}", Range(1e-5, 0.1, log=True)),
    ("mps_high_watermark_ratio: {low: 1, high: 2, step: 0.5}", Range(1.0, 2.0, step=0.5)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_ranges_keep_inclusive_bounds_and_their_kind(tmp_path: Path, text: str, expected: Range) -> None:
    spec = load(tmp_path, HEAD + "space:\n  " + text + "\nsearch:\n  n_trials: 5\n")
    (dim,) = spec.space.values()
    assert dim == expected
    assert type(dim.low) is type(expected.low) and type(dim.high) is type(expected.high)


def test_a_float_knob_accepts_an_int_and_gets_a_float(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "fixed:\n  memory_fraction: 1\n  lr: 1\n  batch_size: 8\n"
                "space:\n  mps_high_watermark_ratio: [1, 1.5]\n")
    assert spec.fixed == {"memory_fraction": 1.0, "lr": 1.0, "batch_size": 8}
    assert [type(v) for v in spec.fixed.values()] == [float, float, int]
    assert spec.space["mps_high_watermark_ratio"].values == (1.0, 1.5)
    assert all(type(v) is float for v in spec.space["mps_high_watermark_ratio"].values)


def test_experiment_parameters_pass_through_unchanged(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "fixed:\n  model: tiny\n  hidden_size: 32\n  dropout: 0.1\n  flag: false\n")
    assert spec.fixed == {"model": "tiny", "hidden_size": 32, "dropout": 0.1, "flag": False}


def test_defaults(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "space:\n  batch_size: [8]\n")
    assert spec.device == "auto"
    assert spec.fixed == {}
    assert spec.objective.metrics == (("samples_per_s", "maximize"),)
    assert spec.objective.constraints == ()
    assert spec.search == SearchSettings(sampler="auto", n_trials=None, stop="auto", band=0.02, seed=None,
                                         max_failures=10)
    assert spec.trial == TrialSettings(warmup_steps=3, measure_steps=10, min_measure_s=1.0, timeout_s=900.0)
    assert spec.storage == DEFAULT_STORAGE == "sqlite:///mlruns/optuna.db"
    assert spec.tracking_uri == DEFAULT_TRACKING_URI == "sqlite:///mlruns/mlflow.db"


def test_sections_with_every_entry_commented_out_take_the_defaults(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "fixed:\nspace:\n  batch_size: [8]\nobjective:\n"
                "search:\n  # n_trials: 4\ntrial:\n  # timeout_s: 20\n")
    assert spec.fixed == {}
    assert spec.objective.metrics == (("samples_per_s", "maximize"),)
    assert spec.search == SearchSettings()
    assert spec.trial == TrialSettings()


def test_settings_are_read(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "device: cpu\nspace:\n  batch_size: [8, 16]\n"
                "search:\n  sampler: grid\n  n_trials: 2\n  seed: 3\n  max_failures: 0\n  timeout_min: 1.5\n  patience: 4\n"
                "trial:\n  warmup_steps: 1\n  measure_steps: 2\n  min_measure_s: 0\n  timeout_s: 30\n")
    assert spec.device == "cpu"
    assert spec.search == SearchSettings("grid", 2, 3, 0, 1.5, 4)
    assert spec.trial == TrialSettings(1, 2, 0.0, 30.0)


def test_multi_objective_metrics_keep_their_order(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "space:\n  batch_size: [8, 16]\nobjective:\n  metrics:\n"
                "    samples_per_s: maximize\n    peak_memory_gib: minimize\nsearch:\n  sampler: nsga2\n")
    assert spec.objective.metrics == (("samples_per_s", "maximize"), ("peak_memory_gib", "minimize"))
    assert spec.search.sampler == "nsga2"


def test_constraints_parse(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "space:\n  batch_size: [8]\nobjective:\n  metric: samples_per_s\n"
                "  constraints:\n    peak_memory_gib: {max: 8}\n    samples_per_s: {min: 100}\n")
    assert spec.objective.constraints == (Constraint("peak_memory_gib", max=8.0),
                                          Constraint("samples_per_s", min=100.0))


@pytest.mark.parametrize("constraint, value, violation", [
    (Constraint("peak_memory_gib", max=8.0), 6.0, -2.0),   # under the cap: feasible
    (Constraint("peak_memory_gib", max=8.0), 8.0, 0.0),    # at the cap: feasible (<= 0)
    (Constraint("peak_memory_gib", max=8.0), 9.5, 1.5),    # over by 1.5
    (Constraint("samples_per_s", min=100.0), 150.0, -50.0),
    (Constraint("samples_per_s", min=100.0), 100.0, 0.0),
    (Constraint("samples_per_s", min=100.0), 40.0, 60.0),  # short by 60
])
def test_constraint_violation_is_optunas_sign_convention(constraint: Constraint, value: float,
                                                          violation: float) -> None:
    assert constraint.violation(value) == pytest.approx(violation)
    assert (constraint.violation(value) <= 0) == (violation <= 0)


OVERRIDES = {
    "--storage": (("storage",), "sqlite:///elsewhere.db"),
    "--tracking-uri": (("tracking_uri",), "sqlite:///elsewhere-mlflow.db"),
    "--n-trials": (("search", "n_trials"), 7),
    "--device": (("device",), "cpu"),
}


def test_overrides_replace_the_specs_values(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "device: mps\nspace:\n  batch_size: [8]\nsearch:\n  n_trials: 40\n"
                "storage: sqlite:///a.db\ntracking_uri: sqlite:///b.db\n", OVERRIDES)
    assert (spec.storage, spec.tracking_uri, spec.search.n_trials, spec.device) == (
        "sqlite:///elsewhere.db", "sqlite:///elsewhere-mlflow.db", 7, "cpu")


def test_overrides_fill_absent_and_empty_sections(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "space:\n  batch_size: [8]\n", OVERRIDES)
    assert (spec.search.n_trials, spec.device) == (7, "cpu")
    spec = load(tmp_path, HEAD + "space:\n  batch_size: [8]\nsearch:\n", OVERRIDES)
    assert spec.search.n_trials == 7


def test_an_unset_flag_leaves_the_spec_alone(tmp_path: Path) -> None:
    unset = {flag: (path, None) for flag, (path, _) in OVERRIDES.items()}
    spec = load(tmp_path, HEAD + "device: mps\nspace:\n  batch_size: [8]\nsearch:\n  n_trials: 40\n", unset)
    assert (spec.search.n_trials, spec.device, spec.storage) == (40, "mps", DEFAULT_STORAGE)


def test_cli_flags_reach_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(HEAD + "device: mps\nspace:\n  batch_size: [8, 16]\n")
    assert main(["spec.yaml", "--dry-run", "--device", "cpu", "--n-trials", "1",
                 "--storage", "sqlite:///other.db"]) == 0
    out = capsys.readouterr().out
    assert "device       cpu" in out
    assert "trials       at most 1 in total" in out
    assert f"storage      sqlite:///{tmp_path / 'other.db'}" in out
    assert [p.name for p in tmp_path.iterdir()] == ["spec.yaml"]
    assert main(["spec.yaml", "--dry-run", "--device", "cpu", "--n-trials", "9", "--storage", "sqlite:///other.db"]) == 0
    assert "trials       at most 2 in total for the study (one per configuration; search.n_trials: 9 is more than " \
        "the space holds), across resumes" in capsys.readouterr().out  # it said "at most 9": a grid of 2 runs 2


@pytest.mark.parametrize("value, spelled, text", [
    (True, None, "true"),
    (True, "yes", "yes (YAML reads it as true)"),
    (False, "Off", "Off (YAML reads it as false)"),
    (None, None, "nothing (an empty value)"),
    (None, "~", "~ (null)"),
    ("40", None, "'40' (text, not a number: remove the quotes)"),
    ("1e3", None, "'1e3' (text, not a number: YAML reads only forms like 1.0e+3 as numbers)"),
    ("fp16", None, "'fp16'"),
    ({"a": 1}, None, "a mapping"),
    ([1, 2], None, "a list"),
    (-8, None, "-8"),
    (0.5, None, "0.5"),
])
def test_show_writes_values_as_yaml_would(value: object, spelled: str | None, text: str) -> None:
    assert show(value, spelled) == text


def test_patience_needs_a_single_objective(tmp_path) -> None:  # noqa: ANN001
    import pytest as _pytest

    from orchestrator.errors import SpecError
    from orchestrator.spec.load import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("name: t\nexperiment: experiments.faults\nobjective:\n  metrics: {samples_per_s: maximize, "
                    "peak_memory_gib: minimize}\nsearch: {n_trials: 3, patience: 2}\n")
    with _pytest.raises(SpecError, match="search.patience: patience needs a single objective metric"):
        load_spec(path)


@pytest.mark.parametrize("text, message", [
    ("name: 5\nexperiment: experiments.mlp\n", ":1: name: the study name must be text (quote it: name: '5'), got 5"),
    (HEAD + "devices: 'auto,cpu'\n", ":3: devices: auto stands alone (it is every visible GPU): give it or a list of "
     "slots, not both, got 'auto'"),  # was "devices must be auto or a list ..., got 'auto'"
    (HEAD + "devices: [cpu, mps, cpu]\n", ":3: devices: a device slot is listed twice (one trial per device at a "
     "time), got 'cpu'"),  # was "got a list"
    (HEAD + "fixed:\n  batch_size: [8, 16]\n", ":4: fixed.batch_size: a fixed value is one value; to try several, "
     "list batch_size under space, got a list"),  # was "batch sizes must be positive integers"
    (HEAD + "fixed:\n  seed: -1\n", ":4: fixed.seed: seeds must be integers >= 0, got -1"),
    (HEAD + "objective:\n  constraints:\n    peak_memory_gib: 12\n", ":5: objective.constraints.peak_memory_gib: a "
     "constraint is a bound, {max: N} or {min: N}, got 12"),  # was "must be a mapping of keys to values"
], ids=["name", "auto-beside", "twice", "fixed-list", "seed", "constraint"])
def test_a_broken_rule_names_the_rule_that_applies(tmp_path: Path, text: str, message: str) -> None:
    """Found by a tour of the docs: each said a rule that did not fit the value it named."""
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value) == f"{path}{message}"
