"""The benchmark scripts still run and print what docs/benchmarks.md quotes (few seeds: a smoke test,
not the figures, which come from the full runs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.replay.landscape import load_landscape

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPES = sorted((ROOT / "bench" / "landscapes").glob("*.csv"))


def test_there_are_recorded_landscapes() -> None:
    assert {p.name for p in LANDSCAPES} >= {"bert_base_h200_cap015.csv", "bert_tiny_cpu_rlimit.csv",
                                            "bert_tiny_cpu_rlimit_r3.csv"}


@pytest.mark.parametrize("path", LANDSCAPES, ids=lambda p: p.name)
def test_each_landscape_is_a_full_grid_with_a_feasible_best(path: Path) -> None:
    land = load_landscape(path)
    sizes = [len(land.values(c)) for c in land.columns]
    assert len(land.rows) == __import__("math").prod(sizes)   # every configuration, once
    assert land.best_feasible() > 0


def test_most_landscapes_reach_their_memory_limit() -> None:
    """The memory boundary is what most of the search's work is about: most tables have OOMs
    (the group that contradicts a prior about throughput need not)."""
    reached = [p.name for p in LANDSCAPES if any(r.status == "oom" for r in load_landscape(p).rows.values())]
    assert len(reached) >= 9, reached


def test_search_efficiency_runs_and_reports_every_strategy_and_target(tmp_path: Path) -> None:
    import json

    out_json = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "search_efficiency.py"), "--seeds", "2",
                           "--noise", "0.02", "--json", str(out_json),
                           str(ROOT / "bench" / "landscapes" / "bert_base_h200_cap015.csv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for strategy in ("grid", "random", "tpe+skip", "shipped", "lightning"):
        assert f"\n   {strategy} " in out, strategy
    assert "seeds 1000-1001, measurement noise 0.02" in out
    assert "shipped ratio" in out and "lightning's 72.5 s" in out and "stop_ratio" in out
    figures = json.loads(out_json.read_text())["bert_base_h200_cap015.csv"]
    assert figures["grid_s"] == pytest.approx(282.117, abs=0.01)
    shipped = figures["strategies"]["shipped"]
    assert set(shipped) == {"ratio", "ratio_p90", "time_to_band_s", "stop_ratio", "stopped_in_band", "wall_s", "sim_s"}
    assert 0 < shipped["wall_s"] < 60 and shipped["sim_s"] == pytest.approx(shipped["stop_ratio"] * figures["grid_s"],
                                                                           rel=1e-3)
    assert set(figures["strategies"]["lightning"]) == {"ratio", "time_to_band_s"}
    assert shipped["ratio"] == pytest.approx(shipped["time_to_band_s"] / figures["grid_s"], abs=1e-3)
    assert figures["strategies"]["grid"]["ratio"] == pytest.approx(0.615, abs=0.002)  # the spec's order, every point


def test_search_slots_prints_the_ratios_and_where_the_most_slots_time_goes() -> None:
    """``bench/search_slots.py --where``: per landscape, the slots' busy share, the band's time over
    the stop and the share of slot time after the band, each a fraction, for the most slots asked."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "search_slots.py"), "--seeds", "2", "--slots", "1,2",
                           "--jobs", "1", "--where", str(ROOT / "bench" / "landscapes" / "mlp_narrow_h100.csv"),
                           str(ROOT / "bench" / "landscapes" / "hf_bert_h100.csv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "where 2 slots' time goes" in out and "2 slots: stop" in out
    rows = {m[0]: [float(x) for x in m[1:]] for m in re.findall(r"^(\S+\.csv) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.MULTILINE)}
    assert set(rows) == {"mlp_narrow_h100.csv", "hf_bert_h100.csv"}, out
    for busy, band, after in rows.values():
        assert 0 < busy <= 1 and 0 < band <= 1 and 0 <= after < 1
    assert rows["hf_bert_h100.csv"][2] > rows["mlp_narrow_h100.csv"][2]  # the band early there, late here


@pytest.mark.slow
@pytest.mark.long  # many processes each way: a benchmark's own check, run with -m long
def test_devices_bench_alternates_rounds_and_prints_the_control(tmp_path: Path) -> None:
    """bench/devices.py on two CPU slots (one core each) against one slot of both cores, two
    alternating rounds, each trial the median of two processes: every configuration compared, the
    control line from the two single-slot rounds, wall times both ways."""
    import json

    from orchestrator.launch.slots import available_cores

    cores = sorted(available_cores())
    if len(cores) < 2:
        pytest.skip("needs two cores")
    spec = tmp_path / "devsmoke.yaml"
    spec.write_text("name: devsmoke   # a comment, as the headline has\nexperiment: experiments.mlp\ndevice: cpu\n"
                    "fixed: {in_features: 16, num_layers: 1, hidden_size: 32}\n"
                    "space: {batch_size: [8, 16]}\nsearch: {sampler: grid}\n"
                    "trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.0}\n")
    one, many = f"cpu:{cores[0]}-{cores[1]}", f"cpu:{cores[0]},cpu:{cores[1]}"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "devices.py"), str(spec), "--one", one,
                          "--many", many, "--rounds", "2", "--repeats", "2", "--json", str(tmp_path / "d.json"),
                          "--logs", str(tmp_path / "logs")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("round 1: ") == 2 and out.stdout.count("round 2: ") == 2
    assert "median of 2 rounds each way, each trial the median of 2 processes" in out.stdout
    assert "batch_size=8" in out.stdout and "batch_size=16" in out.stdout
    assert "control, the 2 single-device rounds against each other" in out.stdout
    assert out.stdout.count(" measured twice; best batch_size=") == 4 and "0 measured twice" in out.stdout
    assert "best found: several's worst round" in out.stdout and "measured twice: 0 (target 0: PASS)" in out.stdout
    for log in ("one_1", "many_1", "one_2", "many_2"):  # the sweeps really ran two processes a trial
        assert (tmp_path / "logs" / f"{log}.log").read_text().count("(median of 2, spread") == 2, log
    assert "CUDA context" not in out.stdout  # said of CUDA sweeps only (bench/contexts.py; tests/project/test_contexts_bench.py)
    got = json.loads((tmp_path / "d.json").read_text())["ways"][many]
    assert len(got["ratios"]) == len(got["control"]) == 2 and all(r > 0 for r in got["ratios"])
    assert all(0 < c <= 1 for c in got["control"])
    assert [(s["way"], s["round"], s["configurations"], s["measured_twice"]) for s in got["sweeps"]] == [
        ("one", 1, 2, 0), ("one", 2, 2, 0), ("several", 1, 2, 0), ("several", 2, 2, 0)]
    assert set(got["walls"]) == {"wall_s", "loop_s"} and got["slots"] == [f"cpu:{cores[0]}", f"cpu:{cores[1]}"]


@pytest.mark.slow
def test_fidelity_bench_measures_the_chosen_configurations_both_ways(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), "--rounds", "1", "--configs", "1",
                          "--only", "dtype=bfloat16", "--only", "batch_size=512", "--min-measure-s", "0.1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "TMPDIR": str(temp)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert not [p.name for p in temp.glob("fidelity-*")]  # its trials' folders went with it
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("hidden_size=")]
    assert len(rows) == 1 and "batch_size=512, dtype=bfloat16" in rows[0] and "spread between rounds" in out.stdout
    assert "throughput ratio pre-started / fresh: median" in out.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), "--only", "dtype"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "--only takes KEY=VALUE, got 'dtype'" in bad.stderr
    none = subprocess.run([sys.executable, str(ROOT / "bench" / "fidelity.py"), "--only", "dtype=float8"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert none.returncode == 1 and "no configuration of" in none.stderr and "dtype=float8" in none.stderr


@pytest.mark.slow
@pytest.mark.long  # many processes each way: a benchmark's own check, run with -m long
def test_startup_bench_times_each_phase_of_both_variants_alternating(tmp_path: Path) -> None:
    """bench/startup.py on the tiny BERT, a copy of this checkout's code as the other variant, two
    rounds: the order alternates, every phase has a figure each way, and the phases add up to
    each trial's startup_s."""
    import json
    import shutil

    other = tmp_path / "copy"
    for part in ("orchestrator", "experiments"):
        shutil.copytree(ROOT / part, other / part, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "startup.py"), "--device", "cpu", "--trials", "2",
                          "--warmup-steps", "2", "--measure-steps", "2", "--min-measure-s", "0.05",
                          "--set", "model=tiny", "--set", "seq_len=32", "--set", "batch_size=8",
                          "--compare", str(other), "--json", str(tmp_path / "startup.json")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    order = [ln.split(":")[0].split(maxsplit=2)[2].strip() for ln in out.stdout.splitlines()
             if ln.startswith("  round ")]
    assert order == ["copy", "this checkout", "this checkout", "copy"]
    assert "device: cpu (" in out.stdout and "torch 2." in out.stdout
    for row in ("device init", "limits", "build", "checkpointing/compile", "optimizer", "warm-up step 1",
                "warm-up step 2", "final synchronize", "startup_s", "samples_per_s", "peak_memory_gib"):
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith(row + " "))
        figures = line[len(row):].split()
        assert "-" not in figures and len(figures) == 5, line  # each way a median and its range, then the ratio
    report = json.loads((tmp_path / "startup.json").read_text())
    for trials in report["figures"].values():
        for t in trials:
            phases = [v for k, v in t.items() if k not in ("process -> trial start", "startup_s",
                                                          "window (measure_s)", "samples_per_s",
                                                          "peak_memory_gib", "loss_first", "loss")]
            assert sum(phases) == pytest.approx(t["startup_s"], abs=0.005)


@pytest.mark.slow
def test_fork_vs_fresh_times_both_ways(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "fork_vs_fresh.py"), "--pairs", "2", "--seconds", "0.2",
                          "--batch", "16"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    pairs = [ln for ln in out.stdout.splitlines() if ln.startswith("pair ")]
    assert len(pairs) == 2 and "(fresh first)" in pairs[0] and "(forked first)" in pairs[1]
    assert "batch 16, 2 pairs: forked / fresh median" in out.stdout


@pytest.mark.slow
@pytest.mark.long  # many processes each way: a benchmark's own check, run with -m long
def test_fork_vs_fresh_interleaved_takes_turns_and_has_a_control(tmp_path: Path) -> None:
    script = str(ROOT / "bench" / "fork_vs_fresh.py")
    out = subprocess.run([sys.executable, script, "--interleave", "4", "--steps", "2", "--batch", "16",
                          "--process-pairs", "2", "--siblings"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    pairs = [ln for ln in out.stdout.splitlines() if ln.startswith("pair ")]
    assert [p.split(":")[0] for p in pairs] == ["pair  1 fresh, forked", "pair  1 fresh, fresh ", "pair  1 forked, forked",
                                                "pair  2 fresh, forked", "pair  2 fresh, fresh ", "pair  2 forked, forked"]
    ratios = []
    for line in pairs:  # the ratio is the second's throughput over the first's, inside its interval
        first, second, ratio, low, high = (float(x.replace(",", "")) for x in re.search(
            r": +([\d,.]+) and +([\d,.]+) samples/s, second / first ([\d.]+) \(95% interval ([\d.]+)-([\d.]+);",
            line).groups())
        assert ratio == pytest.approx(second / first, rel=2e-3) and low <= ratio <= high
        assert "threads" in line
        ratios.append(ratio)
    assert "batch 16, 2 process pairs each, 4 interleaved slices of 2 steps each way per pair" in out.stdout
    verdict = re.search(r"^forked / fresh: ([\d.]+) \(95% interval ([\d.]+)-([\d.]+)\) over 2 pairs of processes; "
                        r"two fresh processes differed by up to ([\d.]+)%$", out.stdout, re.M)
    assert verdict, out.stdout
    mean, low, high, spread = (float(x) for x in verdict.groups())
    assert mean == pytest.approx((ratios[0] * ratios[3]) ** 0.5, rel=2e-4)  # geometric mean of the forked pairs
    assert min(ratios[0], ratios[3]) - 1e-4 <= low <= mean <= high <= max(ratios[0], ratios[3]) + 1e-4
    assert spread == pytest.approx(100 * max(abs(ratios[1] - 1), abs(ratios[4] - 1)), abs=0.06)
    siblings = re.search(r"^two children forked from this one process differed by up to ([\d.]+)%$", out.stdout, re.M)
    assert siblings and float(siblings[1]) == pytest.approx(100 * max(abs(ratios[2] - 1), abs(ratios[5] - 1)), abs=0.06)
    # a run cut off by its time limit: the summary again from the log's pair lines
    (tmp_path / "run.log").write_text(out.stdout)
    again = subprocess.run([sys.executable, script, "--from-log", str(tmp_path / "run.log")], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].endswith("run.log: 2 and 2 and 2 pairs of processes")
    assert again.stdout.splitlines()[1:] == out.stdout.splitlines()[-5:]
    (tmp_path / "other.log").write_text("not a run's log\n")
    wrong = subprocess.run([sys.executable, script, "--from-log", str(tmp_path / "other.log")], capture_output=True,
                           text=True, timeout=60)
    assert wrong.returncode == 1 and wrong.stderr.strip().endswith(
        "other.log: no 'pair N fresh, forked: ...' line (the lines an --interleave run prints)"), wrong.stderr


@pytest.mark.slow
@pytest.mark.long  # real trials each way: the benchmark's own check, run with -m long
def test_hf_vs_bert_runs_both_through_the_harness_and_pairs_them(tmp_path: Path) -> None:
    """bench/hf_vs_bert.py on the CPU with the tiny preset, one round: both experiments measured
    through the real harness with the same architecture (the same parameter count), a paired ratio
    and a verdict per point (docs/gpu/session.sh x runs it on an H100 with BERT-base)."""
    import json

    pytest.importorskip("transformers", reason="the hf extra is not installed")
    out_json = tmp_path / "hf_vs_bert.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "hf_vs_bert.py"), "--device", "cpu", "--preset", "tiny",
                           "--points", "float32:4", "--rounds", "1", "--seq-len", "16", "--measure-steps", "2",
                           "--min-measure-s", "0", "--json", str(out_json)], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parameters: bert 202,280, hf 202,280" in proc.stdout  # the same architecture both ways
    (point,) = json.loads(out_json.read_text())["points"]
    assert point["bert"][0]["status"] == point["hf"][0]["status"] == "ok" and len(point["ratios"]) == 1
    assert re.search(r"float32 +4 .* (within the noise|DIFFERENT)$", proc.stdout, re.M), proc.stdout


@pytest.mark.long  # whole commands each way: a benchmark's own check, run with -m long
def test_first_trial_bench_times_each_mark_of_a_whole_command_against_import_torch(tmp_path: Path) -> None:
    """bench/first_trial.py, one round, a one-trial spec with a short window, a copy of this
    checkout's code as the other side: every mark of the command has a figure for this checkout,
    the marks come in the timeline's order, and the trial's phases add up to its startup_s."""
    import json
    import shutil

    other = tmp_path / "copy"
    for part in ("orchestrator", "experiments"):
        shutil.copytree(ROOT / part, other / part, ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "one.yaml"
    spec.write_text("name: one\nexperiment: experiments.mlp\ndevice: cpu\nspace: {batch_size: [8]}\n"
                    "trial: {warmup_steps: 2, measure_steps: 2, min_measure_s: 0.05, timeout_s: 120}\n")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "first_trial.py"), "--rounds", "1", "--spec", str(spec),
                          "--compare", str(other), "--json", str(tmp_path / "first.json")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    seconds = []
    for label in ("Python and the CLI imported", "probe asked for", "MLflow, Optuna imported", "probe answered",
                  "smoke step answered", "stores opened", "sweep loop started", "first trial started",
                  "  its window opened", "  its window closed", "last trial finished (told)",
                  "stores closed (MLflow settled)", "summary printed", "command's own end",
                  "prompt returned (process reaped)", "beyond the trial's imports and window"):
        row = next(ln for ln in lines if ln.startswith(label + " ") or ln == label)
        figures = row[len(label):].split()
        assert len(figures) == 4 and figures[1].endswith("x") and figures[3].endswith("x"), row  # each side: s, ratio
        seconds.append(float(figures[2]))
    assert seconds[:-1] == sorted(seconds[:-1]), seconds  # the timeline's order (the last row is a difference)
    report = json.loads((tmp_path / "first.json").read_text())
    (run,) = report["runs"]["this checkout"]
    (phases,) = run["phases"]
    parts = [v for k, v in phases.items() if k not in ("forked -> device", "step (window / steps)", "startup_s")]
    assert sum(parts) == pytest.approx(phases["startup_s"], abs=0.005)
