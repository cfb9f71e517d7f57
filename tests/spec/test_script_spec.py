"""A spec that names a training script: its keys' rules (each bad input with its line), and how a
trial's parameters become the script's command line (``orchestrator.spec.script``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT
from orchestrator.errors import SpecError
from orchestrator.protocol import ScriptCall, TrialConfig, TrialSteps, decode_config, encode_config
from orchestrator.spec.load import load_spec
from orchestrator.spec.script import (LOOP_KNOBS, command_line, pasteable, placeholders, samples_per_step,
                                      script_argv, script_call)

HEAD = "name: t\nscript: train.py\n"
SCRIPTS = sorted((ROOT / "examples" / "scripts").glob("*.yaml"))


def load(tmp_path: Path, text: str, script: bool = True):
    if script:
        (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec(path)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_example_script_spec_loads_and_finds_its_script(path: Path) -> None:
    spec = load_spec(path)
    assert spec.script is not None and spec.experiment is None
    assert spec.script_file == (path.parent / spec.script).resolve() and spec.script_file.is_file()
    assert spec.workload == str(spec.script_file) and spec.workload_name == spec.script


def test_the_four_frameworks_have_an_example() -> None:
    assert {p.name for p in SCRIPTS} == {"train.yaml", "hf_trainer.yaml", "lightning.yaml", "accelerate.yaml"}


def test_a_script_spec_loads_its_args_and_samples_expression(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + 'args: ["--bs", "{batch_size}", "--amp", "{amp}", "--width", 8, "{gc}"]\n'
                "samples_per_step: batch_size * accum\n"
                "fixed: {accum: 2, cpu_memory_limit_gib: 1.5}\n"
                "space:\n  batch_size: [16, 64]\n  amp: [none, bf16]\n  gc: ['', --gc]\n")
    assert spec.args == ("--bs", "{batch_size}", "--amp", "{amp}", "--width", "8", "{gc}")
    assert spec.samples_per_step == "batch_size * accum"
    call = script_call(spec, {"batch_size": 64, "amp": "bf16", "gc": "", "accum": 2, "device": "cpu"})
    assert call == ScriptCall(str(tmp_path / "train.py"), ["--bs", "64", "--amp", "bf16", "--width", "8"], 128.0)
    with_flag = script_call(spec, {"batch_size": 16, "amp": "none", "gc": "--gc", "accum": 2, "device": "cpu"})
    assert with_flag.argv[-1] == "--gc"


def test_the_script_is_found_beside_the_spec_then_in_the_working_directory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("")
    spec_path = tmp_path / "specs" / "s.yaml"
    spec_path.write_text("name: t\nscript: code/train.py\nspace: {batch_size: [1]}\nargs: ['{batch_size}']\n")
    monkeypatch.chdir(tmp_path)
    assert load_spec(spec_path).script_file == tmp_path / "code" / "train.py"
    (tmp_path / "specs" / "code").mkdir()
    (tmp_path / "specs" / "code" / "train.py").write_text("")  # the spec's folder comes first
    assert load_spec(spec_path).script_file == tmp_path / "specs" / "code" / "train.py"


def test_a_missing_script_loads_for_the_report_and_is_refused_by_a_run(tmp_path: Path) -> None:
    from orchestrator.spec.script import check_script_file

    spec = load(tmp_path, "name: t\nscript: gone.py\nargs: ['{batch_size}']\nspace: {batch_size: [1]}\n", script=False)
    assert spec.script_file is None
    with pytest.raises(SpecError) as err:
        check_script_file(spec)
    assert str(err.value).startswith(f"{tmp_path / 'spec.yaml'}:2: script: no file gone.py in the spec's folder")


def test_a_script_that_does_not_compile_or_is_a_folder_is_refused_before_any_process(tmp_path: Path) -> None:
    """The tour's ``def f(:`` passed ``--dry-run`` and was said by the smoke step on the spec's
    ``experiment`` field (the spec has none); a shell script the same; a folder was "no file"."""
    from orchestrator.spec.script import check_script_file

    (tmp_path / "train.py").write_text("def f(:\n    pass\n")
    spec = load(tmp_path, "name: t\nscript: train.py\nargs: ['{batch_size}']\nspace: {batch_size: [1]}\n", script=False)
    with pytest.raises(SpecError) as err:
        check_script_file(spec)
    assert str(err.value) == f"{tmp_path / 'spec.yaml'}:2: script: {tmp_path / 'train.py'}:1: SyntaxError: invalid syntax"
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    spec = load(tmp_path, "name: t\nscript: run.sh\nargs: ['{batch_size}']\nspace: {batch_size: [1]}\n", script=False)
    with pytest.raises(SpecError) as err:
        check_script_file(spec)
    assert str(err.value).endswith("run.sh:2: SyntaxError: invalid syntax (it runs as `python run.sh`: is it a Python file?)")
    (tmp_path / "adir").mkdir()
    spec = load(tmp_path, "name: t\nscript: adir\nargs: ['{batch_size}']\nspace: {batch_size: [1]}\n", script=False)
    with pytest.raises(SpecError) as err:
        check_script_file(spec)
    assert str(err.value) == f"{tmp_path / 'spec.yaml'}:2: script: adir is a folder ({tmp_path / 'adir'}), not a script file"


BAD = [
    # (spec text after the name, the expected message's end (after "file:line: "))
    ("space: {batch_size: [1]}\n", "missing required key experiment (a module such as experiments.bert) or script"),
    ("experiment: experiments.mlp\nscript: train.py\nspace: {batch_size: [1]}\n",
     "script: give either experiment (a module, line 2) or script (a training script), not both"),
    ("experiment: experiments.mlp\nargs: [a]\nspace: {batch_size: [1]}\n",
     "args: args belongs to a script spec (script: train.py)"),
    ("script: train.py\nspace: {dtype: [float32, bfloat16]}\n",
     "space.dtype: dtype is applied by the harness's own training loop, which a script does not run; pass it "
     "to the script through args instead"),
    ("script: train.py\nfixed: {grad_accum_steps: 2}\nargs: ['{grad_accum_steps}']\n",
     "fixed.grad_accum_steps: grad_accum_steps is applied by the harness's own training loop"),
    ("script: train.py\nargs: ['--bs', '{bs}']\nspace: {batch_size: [1]}\n",
     "args[1]: {bs} is no parameter of this spec; placeholders name a parameter in fixed or space, or device, "
     "got '{bs}'"),
    ("script: train.py\nargs: ['--bs', '{batch_sise}']\nspace: {batch_size: [1]}\n",
     "args[1]: {batch_sise} is no parameter of this spec; did you mean {batch_size}?"),
    ("script: train.py\nargs: ['{batch_size!r}']\nspace: {batch_size: [1]}\n",
     "args[0]: a placeholder is a parameter's name, as in {batch_size} or {lr:.0e}; {batch_size!r} is not"),
    ("script: train.py\nargs: ['{a.b}']\nspace: {batch_size: [1]}\n",
     "args[0]: a placeholder is a parameter's name"),
    ("script: train.py\nargs: ['{batch_size']\nspace: {batch_size: [1]}\n",
     "args[0]: expected '}' before end of string (write {{ and }} for literal braces)"),
    ("script: train.py\nargs: ['{lr:d}']\nspace: {lr: [0.1]}\n",
     "args[0]: {lr:d} cannot format lr=0.1: Unknown format code 'd' for object of type 'float'"),
    ("script: train.py\nargs: [[1]]\n", "args[0]: each argument is text or a number, got a list"),
    ("script: train.py\nargs: '--bs 8'\n", "args: args must be a list of the script's arguments"),
    ("script: 3\n", "script: script must be the path of a Python file, such as train.py, got 3"),
    ("script: train.py\nargs: ['--bs', '{batch_size}']\nspace: {batch_size: [1], amp: [a, b]}\n",
     "space.amp: the script never sees amp: name it in args (\"{amp}\") or remove it (a script is given its "
     "settings through its arguments only)"),
    ("script: train.py\nfixed: {width: 8}\nargs: []\n", "fixed.width: the script never sees width: name it in args "
     "(\"{width}\") or in samples_per_step, or remove it"),
    # the tour's script read BATCH_SIZE from its environment; counted through samples_per_step alone, every
    # trial trained batch 32 and the sweep recorded a 4x difference between them
    ("script: train.py\nspace: {batch_size: [16, 64]}\nsamples_per_step: batch_size\n",
     "space.batch_size: the script never sees batch_size: samples_per_step counts it, but every trial would "
     "train alike; name it in args (\"{batch_size}\") or remove it"),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1]}\nsamples_per_step: b * c\n",
     "samples_per_step: c is no parameter of this spec (fixed or space), got 'b * c'"),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1]}\nsamples_per_step: __import__('os')\n",
     "samples_per_step: samples_per_step may use numbers, parameter names, + - * / // and parentheses, got "
     "\"__import__('os')\""),
    # a tour: a traceback at the run (ZeroDivisionError, a text parameter), negative throughputs recorded ok
    ("script: train.py\nargs: ['{b}']\nspace: {b: [4, 8]}\nsamples_per_step: b / 0\n",
     "samples_per_step: samples_per_step must be a positive number for every configuration; at b=4 it cannot be "
     "worked out (ZeroDivisionError: float division by zero), got 'b / 0'"),
    ("script: train.py\nargs: ['{b}', '{d}']\nfixed: {d: cpu}\nspace: {b: [4]}\nsamples_per_step: b * d\n",
     "samples_per_step: samples_per_step must be a positive number for every configuration; at b=4 d=cpu it cannot "
     "be worked out (ValueError: could not convert string to float: 'cpu'), got 'b * d'"),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [16, 4]}\nsamples_per_step: b - 10\n",
     "samples_per_step: samples_per_step must be a positive number for every configuration; at b=4 it is -6, "
     "got 'b - 10'"),
    ("script: train.py\nargs: [--bs, {b}]\nspace: {b: [1]}\n",  # a tour: "got a mapping"
     "args[1]: YAML reads an unquoted {b} as a mapping: write it in quotes, \"{b}\""),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1]}\nsamples_per_step: b ** 99\n",  # a tour: "got '', got ..."
     "samples_per_step: samples_per_step may use numbers, parameter names, + - * / // and parentheses, not **, got "
     "'b ** 99'"),
    # the tour's script named its own flag compile: one line saying to rename it, not its value's type besides
    ("script: train.py\nargs: ['{compile}']\nspace: {compile: [0, 1]}\n",
     "space.compile: compile is applied by the harness's own training loop, which a script does not run"),
    # a tour: `accelerate launch` as the script was "no file accelerate launch acc_plain.py", and the launcher's
    # path with `launch ...` in args failed its smoke step saying it exited "before its first optimizer step"
    ("script: accelerate launch fit.py\nargs: ['{b}']\nspace: {b: [1]}\n",
     "script: accelerate is a launcher: it starts the training script in processes of its own, and a trial runs "
     "the script itself, as `python SCRIPT ARGS` in one process measured from its optimizer steps; name the script "
     "(script: fit.py) and put only its own flags in args, got 'accelerate launch fit.py'"),
    ("script: /venv/bin/torchrun\nargs: [--nproc_per_node, '2', fit.py, '{b}']\nspace: {b: [1]}\n",
     "script: torchrun is a launcher: it starts the training script in processes of its own, and a trial runs the "
     "script itself, as `python SCRIPT ARGS` in one process measured from its optimizer steps; name the script "
     "(script: fit.py)"),
    ("script: python3.11\nargs: [fit.py, '{b}']\nspace: {b: [1]}\n",
     "script: python3.11 is a launcher: it runs the training script, and a trial runs the script itself"),
    ("script: python -m pkg.fit\nargs: ['{b}']\nspace: {b: [1]}\n", "name the script (script: pkg/fit.py)"),
    # the tour: the example said "precision" for every knob
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1], grad_accum_steps: [1, 4]}\n",
     "space.grad_accum_steps: grad_accum_steps is applied by the harness's own training loop, which a script does "
     "not run; pass it to the script through args instead, under a name of your own (e.g. accum: [...] and "
     "\"--accum\", \"{accum}\")"),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1]}\nsamples_per_step: 0\n",
     "samples_per_step: samples_per_step must be positive, got 0"),
    ("script: train.py\nargs: ['{b}']\nspace: {b: [1]}\nsamples_per_step: true\n",
     "samples_per_step: samples_per_step must be a number or an expression such as batch_size * accum, got true"),
]


@pytest.mark.parametrize("text, message", BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_each_bad_script_spec_is_one_line_naming_its_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        load(tmp_path, "name: t\n" + text)
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(tmp_path / "spec.yaml") + ":")
    assert message in line, line


@pytest.mark.parametrize("name", LOOP_KNOBS)
def test_every_loop_knob_is_refused_for_a_script(tmp_path: Path, name: str) -> None:
    with pytest.raises(SpecError, match=f"space.{name}: {name} is applied by the harness's own training loop"):
        load(tmp_path, HEAD + f"args: ['{{{name}}}']\nspace: {{{name}: [1, 2]}}\n")


def test_knobs_that_act_from_outside_need_no_placeholder(tmp_path: Path) -> None:
    spec = load(tmp_path, HEAD + "args: ['{batch_size}']\nfixed: {cpu_memory_limit_gib: 1.5, cpu_isa: avx2, "
                "memory_fraction: 0.5, cuda_alloc_conf: 'expandable_segments:True', mps_fallback: true}\n"
                "space: {batch_size: [1, 2], mps_high_watermark_ratio: [1.0, 1.4]}\n")
    assert set(spec.fixed) == {"cpu_memory_limit_gib", "cpu_isa", "memory_fraction", "cuda_alloc_conf", "mps_fallback"}


@pytest.mark.parametrize("arg, expected", [
    ("{batch_size}", [("batch_size", "")]),
    ("--lr={lr:.0e}", [("lr", ".0e")]),
    ("{{literal}}", []),
    ("{a}x{b}", [("a", ""), ("b", "")]),
])
def test_placeholders_are_parameter_names_with_an_optional_format(arg: str, expected: list) -> None:
    assert placeholders(arg) == expected


def test_argv_fills_formats_and_leaves_out_an_empty_flag() -> None:
    args = ("--lr={lr:.0e}", "{flag}", "--bs", "{bs}", "{{x}}", "--on", "{on}")
    assert script_argv(args, {"lr": 0.0003, "flag": "", "bs": 8, "on": True}) == [
        "--lr=3e-04", "--bs", "8", "{x}", "--on", "True"]
    assert command_line("my train.py", ["--name", "a b"]) == "python 'my train.py' --name 'a b'"


@pytest.mark.parametrize("expression, expected", [
    (None, None), (64, 64.0), ("bs", 32.0), ("bs * accum", 64.0), ("(bs + 2) // 4", 8.0), ("bs / 2 - 1", 15.0),
])
def test_samples_per_step_is_evaluated_per_trial(expression: object, expected: float | None) -> None:
    assert samples_per_step(expression, {"bs": 32, "accum": 2}) == expected  # type: ignore[arg-type]


def test_the_pasted_command_names_the_script_relative_to_the_working_directory(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load(tmp_path, HEAD + "args: ['--bs', '{batch_size}']\nspace: {batch_size: [8]}\n")
    monkeypatch.chdir(tmp_path)
    assert pasteable(spec, {"batch_size": 8}) == "python train.py --bs 8"
    monkeypatch.chdir(ROOT)
    assert pasteable(spec, {"batch_size": 8}) == f"python {tmp_path / 'train.py'} --bs 8"


def test_a_script_trial_s_config_crosses_the_process_boundary_whole() -> None:
    config = TrialConfig("/x/train.py", {"batch_size": 8}, TrialSteps(2, 5, 0.5), 3,
                         script=ScriptCall("/x/train.py", ["--bs", "8"], None))
    assert decode_config(encode_config(config)) == config
    module = TrialConfig("experiments.mlp", {"batch_size": 8}, TrialSteps(2, 5, 0.5), 3)
    assert "script" not in encode_config(module) and decode_config(encode_config(module)) == module


def test_the_study_fingerprint_holds_the_script_and_its_args(tmp_path: Path) -> None:
    from orchestrator.search.space import fingerprint, make_plan

    spec = load(tmp_path, HEAD + "args: ['--bs', '{batch_size}']\nspace: {batch_size: [8]}\n")
    fp = fingerprint(spec, make_plan(spec, "cpu"))
    assert fp["script"] == "train.py" and fp["args"] == ["--bs", "{batch_size}"] and "experiment" not in fp


def test_a_script_in_a_folder_named_like_a_launcher_is_a_script(tmp_path: Path) -> None:
    """A review: ``python projects/train.py``, a file, was refused as the launcher ``python``."""
    (tmp_path / "python projects").mkdir()
    (tmp_path / "python projects" / "train.py").write_text("print('hi')\n")
    spec = load(tmp_path, "name: t\nscript: python projects/train.py\nargs: ['{b}']\nspace: {b: [1]}\n", script=False)
    assert spec.script_file == (tmp_path / "python projects" / "train.py").resolve()
