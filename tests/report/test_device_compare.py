"""CPU against the device (or any swept parameter): ``orchestrate report``'s comparison table and
plot, and ``orchestrate best``'s device line (orchestrator/report/compare.py).

Here there is only a CPU, so the real sweep compares precisions (``--compare dtype``) through the
same code that compares devices: the session's shared tiny-BERT sweep of tests/report/test_report.py
(float32 against bfloat16 at three batch sizes, the largest out of memory), reported without
touching its MLflow runs. The device-specific wording (speedup over the CPU, which device to use)
is checked on a study of cuda/cpu trials recorded as a GPU host's sweep records them: a contract
test, since no GPU can make them here."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, load_study, orchestrate, write_spec
from report.test_report import finished_sweep


def report_main(project: Path, *args: str) -> tuple[int, str, str]:
    """``orchestrate report|best ...`` in this process (the installed command is run once, for the
    text): the same code, without another interpreter's start-up."""
    from orchestrator.report import command as report

    out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(project)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = report.main(list(args))
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_sweep(tmp_path_factory)


@pytest.fixture(scope="module")
def away(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Where these reports' plots go, and an MLflow store that does not exist: the shared sweep's
    parent run keeps exactly the plots tests/report/test_report.py expects."""
    out = tmp_path_factory.mktemp("compare_out")
    return ["--out", str(out), "--tracking-uri", f"sqlite:///{out}/none.db"]


def test_shipped_cpu_spec_compares_precisions_on_the_cpu() -> None:
    from orchestrator.spec.load import load_spec

    spec = load_spec(ROOT / "sweeps" / "device_compare_cpu.yaml")
    assert spec.device == "cpu" and list(spec.space) == ["dtype", "hidden_size", "batch_size"]
    assert spec.space["dtype"].values == ("float32", "bfloat16")
    for name in ("device_compare.yaml", "device_compare_mps.yaml"):
        gpu = load_spec(ROOT / "sweeps" / name)
        assert list(gpu.space) == ["device", "hidden_size", "batch_size"] and "cpu" in gpu.space["device"].values


def test_compare_dtype_report_matches_the_study(cpu_sweep: Path, away: list[str]) -> None:
    from orchestrator.store.records import results_of

    code, out, _ = report_main(cpu_sweep, "report", "spec.yaml", "--compare", "dtype", "--format", "json", *away)
    assert code == 0
    comp = json.loads(out)["comparison"]
    trials = results_of(load_study(cpu_sweep, "tiny_report").get_trials())
    assert comp["knob"] == "dtype" and comp["reference"] == "float32" and comp["values"] == ["float32", "bfloat16"]
    assert comp["params"] == ["batch_size"] and comp["folded"] == []
    by = {(t.params["dtype"], t.params["batch_size"]): t for t in trials}
    assert [r["params"] for r in comp["rows"]] == [{"batch_size": 8}, {"batch_size": 16}, {"batch_size": 4096}]
    speedups = []
    for row in comp["rows"]:
        b = row["params"]["batch_size"]
        for dtype, cell in row["cells"].items():
            t = by[(dtype, b)]
            ok = t.user_attrs["status"] == "ok"
            assert cell["trial"] == t.number and cell["status"] == t.user_attrs["status"]
            assert cell["samples_per_s"] == (t.user_attrs["metrics"]["samples_per_s"] if ok else None)
        base, other = row["cells"]["float32"], row["cells"]["bfloat16"]
        if base["samples_per_s"] and other["samples_per_s"]:
            assert other["speedup"] == pytest.approx(other["samples_per_s"] / base["samples_per_s"])
            speedups.append(other["speedup"])
        else:
            assert other["speedup"] is None
        assert base["speedup"] is None  # the reference has none
    assert len(speedups) == 2  # batch 4096 does not fit in 1 GiB, in either precision
    assert comp["rows"][2]["cells"]["float32"]["status"] == "oom"
    s = comp["summary"]["bfloat16"]
    assert s["compared"] == 2 and s["faster"] == sum(u > 1 for u in speedups)
    assert (s["lowest"], s["highest"]) == (min(speedups), max(speedups))


def test_compare_dtype_text_and_plot_from_the_installed_command(cpu_sweep: Path, away: list[str]) -> None:
    from orchestrator.store.records import results_of

    proc = orchestrate(["report", "spec.yaml", "--compare", "dtype", *away], cpu_sweep)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    start = out.index("Comparison by dtype: samples/s per configuration of the other parameters, "
                      "and the speedup over dtype float32")
    table = out[start:].splitlines()
    assert table[1].split() == ["batch_size", "dtype", "float32", "dtype", "bfloat16"]
    trials = {(t.params["dtype"], t.params["batch_size"]): t
              for t in results_of(load_study(cpu_sweep, "tiny_report").get_trials())}
    for line, b in zip(table[2:4], (8, 16)):
        a = trials[("float32", b)].user_attrs["metrics"]["samples_per_s"]
        c = trials[("bfloat16", b)].user_attrs["metrics"]["samples_per_s"]
        assert line.split() == [str(b), f"{a:,.1f}", f"{c:,.1f}", f"{c / a:.2f}x"]
    f32, bf16 = trials[("float32", 4096)], trials[("bfloat16", 4096)]
    assert table[4].split() == ["4096", "oom", f"(#{f32.number})", bf16.user_attrs["status"], f"(#{bf16.number})"]
    assert re.fullmatch(r"  bfloat16 against float32: faster in \d of 2 configuration\(s\) where both ran; "
                        r"median \d+\.\d\dx \(from \d+\.\d\dx to \d+\.\d\dx\)", table[5])
    assert table[6].startswith("  Fastest: dtype ")
    png = Path(away[1]) / "compare_dtype.png"
    assert png.stat().st_size > 20_000 and f"Plots:   {away[1]}/ (compare_dtype.png, " in out
    assert "plots not logged" in out  # the shared sweep's MLflow runs are left alone


def test_the_plots_command_a_comparison_prints_draws_its_plot_too(cpu_sweep: Path) -> None:
    """The docs tour: ``report --compare dtype`` printed ``report spec.yaml --plots``, which, pasted,
    drew no ``compare_dtype.png`` (and removed the one drawn before)."""
    code, out, _ = report_main(cpu_sweep, "report", "spec.yaml", "--compare", "dtype")
    assert code == 0 and out.splitlines()[-1].endswith(" report spec.yaml --compare dtype --plots"), out
    code, out, _ = report_main(cpu_sweep, "report", "spec.yaml")
    assert code == 0 and out.splitlines()[-1].endswith(" report spec.yaml --plots"), out


def test_compare_needs_a_swept_parameter(cpu_sweep: Path, away: list[str]) -> None:
    code, out, err = report_main(cpu_sweep, "report", "spec.yaml", "--compare", "seq_len", *away)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert ("--compare seq_len: not a swept parameter of spec.yaml (swept: batch_size, dtype, "
            "mps_high_watermark_ratio)") in err
    code, out, _ = report_main(cpu_sweep, "report", "spec.yaml", "--format", "json", *away)
    plain = json.loads(out)  # no device swept, no --compare: no comparison, no comparison plot
    assert code == 0 and plain["comparison"] is None and plain["plots"]
    assert not {"compare_dtype.png", "devices.png"} & {Path(p).name for p in plain["plots"]}


# -- a device-swept study (contract: cuda/cpu trials cannot be made here) --------------------------

DEVICE_SPEC = """
    name: device_compare
    experiment: experiments.mlp
    fixed:
      in_features: 64
      num_layers: 4
    space:
      device: [cuda, cpu]
      hidden_size: [256, 1024]
      batch_size: [64, 1024]
    search:
      sampler: grid
    """
# (device, hidden, batch) -> (status, samples/s): the shape of a GPU host's sweep, not a measurement
TABLE = {("cuda", 256, 64): ("ok", 9_000.0), ("cuda", 256, 1024): ("ok", 120_000.0),
         ("cuda", 1024, 64): ("ok", 8_000.0), ("cuda", 1024, 1024): ("ok", 90_000.0),
         ("cpu", 256, 64): ("ok", 3_000.0), ("cpu", 256, 1024): ("ok", 12_000.0),
         ("cpu", 1024, 64): ("ok", 1_000.0), ("cpu", 1024, 1024): ("oom", None)}


CHOICES = {"device": ["cuda", "cpu"], "hidden_size": [256, 1024], "batch_size": [64, 1024]}


def make_trial(number: int, params: dict[str, Any], status: str, sps: float | None,
               choices: dict[str, list[Any]] | None = None) -> Any:
    """A finished trial as the sweep records it (``status``, ``metrics``; infeasible ones PRUNED)."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    dists = {k: CategoricalDistribution((choices or {}).get(k, [v])) for k, v in params.items()}
    attrs = {"status": status, "metrics": {"samples_per_s": sps, "peak_memory_gib": 1.0} if sps else {}}
    if sps is not None:
        t = create_trial(params=params, distributions=dists, value=sps, user_attrs=attrs,
                         system_attrs={"constraints": [-1.0]})
    else:
        t = create_trial(params=params, distributions=dists, state=TrialState.PRUNED, user_attrs=attrs)
    t.number = number
    return t


@pytest.fixture
def device_study(tmp_path: Path) -> Path:
    import optuna

    write_spec(tmp_path, DEVICE_SPEC)
    (tmp_path / "mlruns").mkdir()
    study = optuna.create_study(study_name="device_compare", storage=f"sqlite:///{tmp_path}/mlruns/optuna.db",
                                directions=["maximize"])
    for i, ((device, h, b), (status, sps)) in enumerate(TABLE.items()):
        study.add_trial(make_trial(i, {"device": device, "hidden_size": h, "batch_size": b}, status, sps, CHOICES))
    return tmp_path


@pytest.mark.contract
def test_contract_device_comparison_in_the_report(device_study: Path) -> None:
    code, out, err = report_main(device_study, "report", "spec.yaml", "--plots")
    assert code == 0, err
    lines = out.splitlines()
    i = lines.index("Device comparison: samples/s per configuration of the other parameters, and the speedup "
                    "over device cpu")
    assert [ln.split() for ln in lines[i + 1:i + 6]] == [
        ["hidden_size", "batch_size", "device", "cpu", "device", "cuda"],
        ["256", "64", "3,000.0", "9,000.0", "3.00x"],
        ["256", "1024", "12,000.0", "120,000.0", "10.00x"],
        ["1024", "64", "1,000.0", "8,000.0", "8.00x"],
        ["1024", "1024", "oom", "(#7)", "90,000.0"],
    ]
    assert lines[i + 6] == "  cuda against cpu: faster in 3 of 3 configuration(s) where both ran; median 8.00x (from 3.00x to 10.00x)"
    assert lines[i + 7] == "  Fastest: device cuda, trial 1 at 120,000.0 samples/s; best on cpu: 12,000.0 (trial 5)"
    png = device_study / "mlruns" / "reports" / "device_compare" / "devices.png"
    assert png.stat().st_size > 20_000
    doc = json.loads(report_main(device_study, "report", "spec.yaml", "--format", "json")[1])
    assert doc["comparison"]["reference"] == "cpu" and doc["comparison"]["values"] == ["cpu", "cuda"]
    assert doc["device"] == "cuda and cpu" and doc["device_name"] is None  # no one device speaks for the study


@pytest.mark.contract
def test_contract_best_names_the_faster_device(device_study: Path) -> None:
    import yaml

    code, out, err = report_main(device_study, "best", "spec.yaml")
    assert code == 0, err
    assert yaml.safe_load(out)["device"] == "cuda"
    assert err == ("device_compare trial 1: 120,000.0 samples/s, peak 1.00 GiB (cuda); use device "
                   "cuda: 10.00x cpu (12,000.0 samples/s, trial 5) at the same other settings\n")
    assert out.startswith("# device_compare trial 1: 120,000.0 samples/s, peak 1.00 GiB (cuda); use device cuda: 10.00x cpu")


@pytest.mark.contract
def test_contract_best_says_when_the_cpu_is_faster() -> None:
    """A model too small for the device (MPS is often slower than the CPU there): use the CPU."""
    from orchestrator.report.compare import comparison, device_advice

    trials = [make_trial(0, {"device": "mps", "batch_size": 8}, "ok", 400.0),
              make_trial(1, {"device": "cpu", "batch_size": 8}, "ok", 1_000.0),
              make_trial(2, {"device": "mps", "batch_size": 64}, "swapped", None),
              make_trial(3, {"device": "cpu", "batch_size": 64}, "ok", 900.0)]
    comp = comparison(trials)
    assert device_advice(comp, trials[1]) == ("use device cpu: 2.50x mps (400.0 samples/s, trial 0) at the same "
                                              "other settings")
    assert device_advice(comp, trials[3]) == "use device cpu: mps swapped (trial 2) at the same other settings"


# -- the pure function: folded knobs, missing cells, the reference ----------------------------------

def test_comparison_folds_a_knob_only_one_device_reads() -> None:
    from orchestrator.report.compare import comparison

    trials = [
        make_trial(0, {"device": "mps", "batch_size": 64, "mps_high_watermark_ratio": 1.0}, "ok", 500.0),
        make_trial(1, {"device": "mps", "batch_size": 64, "mps_high_watermark_ratio": 1.7}, "swapped", None),
        make_trial(2, {"device": "cpu", "batch_size": 64}, "ok", 100.0),
        make_trial(3, {"device": "mps", "batch_size": 512, "mps_high_watermark_ratio": 1.0}, "oom", None),
        make_trial(4, {"device": "mps", "batch_size": 512, "mps_high_watermark_ratio": 1.7}, "swapped", None),
        make_trial(5, {"device": "cpu", "batch_size": 512}, "ok", 150.0),
    ]
    comp = comparison(trials)
    assert comp["reference"] == "cpu" and comp["values"] == ["cpu", "mps"]  # cpu first, though mps came first
    assert comp["params"] == ["batch_size"] and comp["folded"] == ["mps_high_watermark_ratio"]
    r64, r512 = comp["rows"]
    assert r64["cells"]["mps"] == {"trial": 0, "status": "ok", "samples_per_s": 500.0, "speedup": 5.0}
    assert r512["cells"]["mps"]["status"] == "oom" and r512["cells"]["mps"]["speedup"] is None  # the worse failure
    assert comp["summary"]["mps"] == {"compared": 1, "faster": 1, "median": 5.0, "lowest": 5.0, "highest": 5.0}


@pytest.mark.parametrize("values, reference, expected", [
    (["cuda", "cpu"], None, "cpu"),
    (["cuda", "mps"], None, "cuda"),       # no CPU: the first value seen
    (["float32", "bfloat16"], "bfloat16", "bfloat16"),
])
def test_comparison_reference(values: list[str], reference: str | None, expected: str) -> None:
    from orchestrator.report.compare import comparison

    knob = "device" if values[0] in ("cuda", "cpu", "mps") else "dtype"
    trials = [make_trial(i, {knob: v, "batch_size": 64}, "ok", 10.0 * (i + 1)) for i, v in enumerate(values)]
    comp = comparison(trials, knob, reference)
    assert comp["reference"] == expected and comp["values"][0] == expected


def test_no_comparison_with_one_value() -> None:
    from orchestrator.report.compare import comparison

    assert comparison([make_trial(0, {"device": "cpu", "hidden_size": 256, "batch_size": 64}, "ok", 1.0)]) is None


def test_a_crowded_comparison_names_its_parameters_once() -> None:
    """The HF tour's ``compare_dtype.png``: eight groups of ``batch_size=8`` over
    ``grad_accum_steps=1`` ran into each other ("grad_accum_steps=g1rad_accum_steps=2")."""
    from orchestrator.report.plots import tick_labels

    few = [{"params": {"batch_size": b}} for b in (8, 32)]
    assert tick_labels(few) == (["batch_size=8", "batch_size=32"], "")
    many = [{"params": {"batch_size": b, "grad_accum_steps": g}} for b in (8, 32, 128, 1024) for g in (1, 2)]
    labels, names = tick_labels(many)
    assert labels[:3] == ["8\n1", "8\n2", "32\n1"] and names == ": batch_size, grad_accum_steps, top to bottom"
