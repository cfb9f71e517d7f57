"""Every rule a spec breaks is found in one read, one line each in the file's order
(``rules.Checker``); a rule that joins parameters waits until each of them is valid."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ORCHESTRATE
from orchestrator.errors import SpecError, SpecErrors, each_error
from orchestrator.spec.load import load_spec

MANY = """\
name: t
experiment: experiments.mlp
devcie: cpu
fixed:
  hidden_size: 64
  memory_fraction: 3
space:
  batch_size: [8, -8]
  dtype: [float32, fp8]
objective:
  metric: samples_per_second
search:
  sampler: grid
  band: 2
trial:
  measure_step: 3
"""


def errors_of(tmp_path: Path, text: str, overrides: dict | None = None) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path, overrides)
    return [str(e).replace(f"{path}:", "") for e in each_error(caught.value)]


def test_every_error_at_once_in_the_files_order(tmp_path: Path) -> None:
    found = errors_of(tmp_path, MANY)
    assert [line.split(":", 1)[0] for line in found] == ["3", "6", "8", "9", "11", "14", "16"]
    assert found[0] == "3: devcie: unknown key; did you mean 'device'? valid keys are name, experiment, script, " \
                       "args, samples_per_step, device, devices, fixed, space, objective, search, trial, storage, tracking_uri"
    assert found[1].startswith("6: fixed.memory_fraction: ") and found[1].endswith(", got 3")
    assert found[2].startswith("8: space.batch_size[1]: ") and found[2].endswith("got -8")
    assert found[3].startswith("9: space.dtype[1]: ") and "fp8" in found[3]
    assert found[4].startswith("11: objective.metric: objective metric must be one of")
    assert found[5].startswith("14: search.band: band is a fraction of the best")
    assert found[6].startswith("16: trial.measure_step: unknown key; did you mean 'measure_steps'?")


def test_each_trial_setting_s_error_is_said_beside_the_others(tmp_path: Path) -> None:
    """The fault tour: ``timeout_s: fast`` and ``warmup_steps: -1`` said only the second."""
    found = errors_of(tmp_path, "name: t\nexperiment: experiments.mlp\ntrial:\n  timeout_s: fast\n"
                                "  warmup_steps: -1\n  precision: 2\n")
    assert [line.split(": ", 2)[1] for line in found] == ["trial.timeout_s", "trial.warmup_steps", "trial.precision"]


def test_one_error_is_a_plain_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [0]\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert not isinstance(caught.value, SpecErrors) and caught.value.line == 4


def test_a_flag_s_error_comes_first_and_names_the_flag(tmp_path: Path) -> None:
    found = errors_of(tmp_path, "name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [0]\n",
                      {"--n-trials": (("search", "n_trials"), 0)})
    assert found[0].startswith("--n-trials: search.n_trials: n_trials must be a positive integer")
    assert found[1].startswith("4: space.batch_size[0]")


def test_a_misspelled_required_key_is_said_once(tmp_path: Path) -> None:
    found = errors_of(tmp_path, "name: t\nexperiment: experiments.mlp\nspace:\n  lr: {low: 0.1, hihg: 1}\n"
                                "search:\n  n_trials: 0\n")
    assert len(found) == 2 and "did you mean 'high'?" in found[0] and found[1].startswith("6: search.n_trials")


def test_rules_that_join_parameters_wait_for_valid_parameters(tmp_path: Path) -> None:
    """effective_batch_size against batch_size is not judged while batch_size itself is broken."""
    text = ("name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [8, x]\n"
            "  effective_batch_size: [4]\n")
    found = errors_of(tmp_path, text)
    assert len(found) == 1 and found[0].startswith("4: space.batch_size[1]")


SCRIPT = """\
name: s
script: train.py
args: ["--bs", "{batch_sise}", "--lr", "{lr:.0e}", "--x", "{x!r}"]
fixed:
  lr: 0.1
  dtype: bfloat16
space:
  batch_size: [8, 16]
  grad_accum_steps: [1, 2]
"""


def test_a_script_spec_s_rules_are_each_reported(tmp_path: Path) -> None:
    found = errors_of(tmp_path, SCRIPT)
    assert [line.split(":", 1)[0] for line in found] == ["3", "3", "6", "9"]
    assert "{batch_sise} is no parameter of this spec; did you mean {batch_size}?" in found[0]
    assert "args[5]" in found[1] and "a placeholder is a parameter's name" in found[1]
    assert found[2].startswith("6: fixed.dtype: dtype is applied by the harness's own training loop")
    assert found[3].startswith("9: space.grad_accum_steps: grad_accum_steps is applied by the harness's own")


def test_a_script_spec_s_unused_parameters_are_each_reported(tmp_path: Path) -> None:
    text = ("name: s\nscript: train.py\nargs: [\"--bs\", \"{batch_size}\"]\nfixed:\n  width: 8\n"
            "space:\n  batch_size: [8, 16]\n  depth: [1, 2]\nsamples_per_step: batch_size * accum\n")
    found = errors_of(tmp_path, text)
    assert len(found) == 1 and found[0].startswith("9: samples_per_step: accum is no parameter")
    text = text.replace("samples_per_step: batch_size * accum\n", "")
    found = errors_of(tmp_path, text)
    assert [f.split(": ", 2)[:2] for f in found] == [["5", "fixed.width"], ["8", "space.depth"]]
    assert all("the script never sees" in f for f in found)


def test_the_command_prints_one_line_per_error_and_exits_2(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(MANY)
    proc = subprocess.run([ORCHESTRATE, str(spec), "--dry-run"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 7 and all(line.startswith(f"{spec}:") for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.parametrize("value, shown", [("0", "0"), ("0.6", "0.6"), ("0.5000001", "0.5000001"), ("high", "'high'"),
                                          ("-0.01", "-0.01"), ("true", "true")])
def test_a_window_s_precision_is_a_fraction_up_to_a_half(tmp_path: Path, value: str, shown: str) -> None:
    found = errors_of(tmp_path, f"name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [8]\n"
                                f"trial:\n  precision: {value}\n")
    assert found == [f"6: trial.precision: precision must be a fraction above 0 and at most 0.5 (0.005 closes the "
                     f"window once its throughput is known within +-0.5%), or null, got {shown}"]


def test_a_window_s_precision_is_read_and_unset_by_default(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [8]\n")
    assert load_spec(path).trial.precision is None
    for given, read in (("0.005", 0.005), ("0.5", 0.5), ("1.0e-9", 1e-9), ("null", None)):
        path.write_text(f"name: t\nexperiment: experiments.mlp\nspace:\n  batch_size: [8]\ntrial:\n  precision: {given}\n")
        assert load_spec(path).trial.precision == read


@pytest.mark.parametrize("order, error", [
    ("{dtpye: {float32: 2, bfloat16: 1}}", "8: search.memory_order.dtpye: did you mean 'dtype'? memory_order names "
                                           "parameters of space (or fixed): batch_size, dtype, got 'dtpye'"),
    ("{dtype: {float32: 2, bfloat16: 1, fp8: 0}}", "8: search.memory_order.dtype.fp8: no choice of space.dtype (its "
                                                   "choices: 'float32', 'bfloat16'), got 'fp8'"),
])
def test_a_memory_order_names_the_space_s_parameters_and_their_choices(tmp_path: Path, order: str, error: str) -> None:
    """A script tour: a misspelt name was accepted, and the search went on with no order for the real one."""
    text = ("name: t\nexperiment: experiments.mlp\ndevice: cpu\nspace:\n  batch_size: [8, 16]\n"
            f"  dtype: [float32, bfloat16]\nsearch:\n  memory_order: {order}\n")
    assert errors_of(tmp_path, text) == [error]


def test_a_memory_order_ranks_boolean_and_number_choices_by_their_yaml_spelling(tmp_path: Path) -> None:
    """A script tour: ``{false: 2, true: 1}`` was refused (keys must be names), and the quoted
    ``{"false": 2, "true": 1}`` then refused as "no choice of space.bf16 (its choices: false, true)"."""
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nexperiment: experiments.mlp\ndevice: cpu\nspace:\n  batch_size: [8, 16]\n"
                    "  activation_checkpointing: [false, true]\n  hidden_size: [16, 32]\nsearch:\n  memory_order:\n"
                    "    activation_checkpointing: {'false': 2, 'true': 1}\n    hidden_size: {'16': 1, '32': 2}\n")
    order = load_spec(path).search.memory_order
    assert order["activation_checkpointing"] == {False: 2, True: 1} and order["hidden_size"] == {16: 1, 32: 2}


def test_a_choice_names_what_its_common_other_name_means(tmp_path: Path) -> None:
    """A tour: ``device: gpu`` was asked "did you mean 'cpu'?" (the closest spelling); a name users
    write for a value (gpu, bf16), or the value in another case, now points at that value,
    top-level, fixed or swept (gpu: cuda here; mps on a Mac)."""
    found = errors_of(tmp_path, "name: t\nexperiment: experiments.mlp\ndevice: gpu\nfixed:\n  dtype: bf16\n"
                                "space:\n  batch_size: [8]\n  zero_grad: [set_to_nne]\n")
    assert found == ["3: device: device must be one of auto, mps, cuda, cpu (did you mean 'cuda'?), got 'gpu'",
                     "5: fixed.dtype: dtype must be one of float32, float16, bfloat16 (did you mean 'bfloat16'?), got 'bf16'",
                     "8: space.zero_grad[0]: zero_grad must be one of set_to_none, zero_fill (did you mean "
                     "'set_to_none'?), got 'set_to_nne'"]
    swept = errors_of(tmp_path, "name: t\nexperiment: experiments.mlp\nspace:\n  device: [cpu, nvidia]\n"
                                "  dtype: [Float16]\n")
    assert swept == ["4: space.device[1]: device must be one of mps, cuda, cpu (did you mean 'cuda'?), got 'nvidia'",
                     "5: space.dtype[0]: dtype must be one of float32, float16, bfloat16 (did you mean 'float16'?), "
                     "got 'Float16'"]
