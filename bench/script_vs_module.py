"""The same model both ways: ``experiments.bert`` as a module and ``bench/scripts/bert_loop.py`` (the
same model and batches in a plain loop) as an unchanged script, each point a real trial through
the harness; and the cost of the script mode's hooks on the script's own step time.

    python bench/script_vs_module.py                       # BERT-base on CUDA: 3 points, 3 rounds, hooks
    python bench/script_vs_module.py --device cpu --model tiny --seq-len 64 \\
        --points float32:16 float32:64 bfloat16:64 --rounds 3          # the CPU figures (5% target)

**Agreement**: each round runs every point as a module trial and as a script trial (``python -m
orchestrator.harness CONFIG`` in a fresh process: the harness's warm-up and synchronized window
for the module; the script's own loop measured through torch's optimizer step hooks, with
``samples_per_step`` = the batch, for the script), the order of the two swapped from round to
round. Per point: the median samples/s of each, their spread over the rounds, script/module per
round (paired) and its median, against the target (``--target``: 2% on CUDA, 5% on the CPU).

**Hooks**: the script alone times its own steps (``--time``: steps after the warm-up, synchronized
at both ends) in a fresh process, bare (``python bert_loop.py``) and with the hooks installed as a
trial installs them (``--hooked``: the step hook and the DataLoader count, the window open after
the warm-up and never closed, so that every step records its mark), alternating; hooked/bare per
pair and its median; and the time the hooked runs spent inside the hooks, per step, against the
bare step time (target: the hooks cost at most 1% of the step time; the paired ratio shows the
machine's noise beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "bench" / "scripts" / "bert_loop.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="bert-base")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--points", nargs="+", default=["float32:32", "bfloat16:64", "bfloat16:128"], metavar="DTYPE:BATCH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--measure-steps", type=int, default=10)
    p.add_argument("--min-measure-s", type=float, default=1.0)
    p.add_argument("--hook-pairs", type=int, default=4, help="bare/hooked pairs of the hooks' cost (0: skip)")
    p.add_argument("--hook-point", default="bfloat16:64", metavar="DTYPE:BATCH")
    p.add_argument("--hook-steps", type=int, default=60, help="steps the script times (after the warm-up)")
    p.add_argument("--target", type=float, help="largest |script/module - 1| (default: 0.02 on cuda, 0.05 else)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per process")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--hooked", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def loop_args(args: argparse.Namespace, dtype: str, batch: int) -> list[str]:
    return ["--model", args.model, "--seq-len", str(args.seq_len), "--batch-size", str(batch), "--dtype", dtype,
            "--device", args.device]


def trial(kind: str, dtype: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """One real trial in a fresh process (the module, or the loop as a script); its figures."""
    params: dict[str, Any] = {"device": args.device, "batch_size": batch, "seed": 0}
    if kind == "module":
        params.update(model=args.model, seq_len=args.seq_len, dtype=dtype)
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        config: dict[str, Any] = {"experiment": "experiments.bert" if kind == "module" else str(LOOP),
                                  "result_path": str(result_path), "params": params,
                                  "trial": {"warmup_steps": args.warmup_steps, "measure_steps": args.measure_steps,
                                            "min_measure_s": args.min_measure_s}}
        if kind == "script":
            config["script"] = {"path": str(LOOP), "argv": loop_args(args, dtype, batch), "samples_per_step": batch}
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        try:
            proc = subprocess.run([sys.executable, "-m", "orchestrator.harness", str(Path(tmp) / "config.json")],
                                  capture_output=True, text=True, timeout=args.timeout, cwd=ROOT, env=_env())
        except subprocess.TimeoutExpired:
            return {"status": "timeout"}
        if not result_path.exists():
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            return {"status": "crashed", "detail": tail[-1] if tail else f"exit code {proc.returncode}"}
        result = json.loads(result_path.read_text())
    m = result.get("metrics") or {}
    return {"status": result["status"], "detail": result.get("detail"), "samples_per_s": m.get("samples_per_s"),
            "peak_memory_gib": m.get("peak_memory_gib"), "step_time_ms_p50": m.get("step_time_ms_p50"),
            "device_name": result.get("provenance", {}).get("device_name"),
            "torch_version": result.get("provenance", {}).get("torch_version")}


def _env() -> dict[str, str]:
    """The trial finds experiments/ and orchestrator/ from the repository's root."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def timed_loop(args: argparse.Namespace, hooked: bool) -> tuple[float | None, float | None]:
    """The loop's own samples/s over ``--hook-steps`` steps after the warm-up, bare or hooked;
    hooked, also the seconds a step spent inside the hooks."""
    dtype, batch = args.hook_point.split(":")
    argv = [*loop_args(args, dtype, int(batch)), "--time", str(args.warmup_steps),
            "--steps", str(args.warmup_steps + args.hook_steps)]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--hooked", str(LOOP), *argv] if hooked \
        else [sys.executable, str(LOOP), *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT, env=_env())
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("LOOP ")), None)
    hooks = next((ln.split() for ln in proc.stdout.splitlines() if ln.startswith("HOOKS ")), None)
    if line is None:
        print(f"  {'hooked' if hooked else 'bare'} run failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return None, None
    return float(line.split()[1]), (float(hooks[1]) / int(hooks[4]) if hooks and int(hooks[4]) else None)


def run_hooked(argv: list[str]) -> int:
    """``--hooked SCRIPT ARGS...``: the script with a trial's hooks in place (the meter's window
    opens after the first step and never closes: every step records its mark, as in a trial)."""
    sys.path.insert(0, str(ROOT))
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from orchestrator.harness import backend, swap, train
    from orchestrator.protocol import ScriptCall, TrialConfig, TrialSteps
    from orchestrator.harness.script import Meter, counting_batches, run_script

    script = ScriptCall(argv[0], argv[1:], None)
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"
    config = TrialConfig(argv[0], {"device": device}, TrialSteps(1, 10 ** 9, float("inf")), script=script)
    backend.init_device(device)
    progress = train.Progress()
    meter = Meter(config, device, progress, progress.mark("device"), lambda out: None, swap.read_swap())
    spent = [0.0, 0]  # seconds inside the hooks, steps

    def on_step(*a: Any) -> None:
        t = time.perf_counter()
        meter.on_step(*a)
        spent[0] += time.perf_counter() - t
        spent[1] += 1

    def on_batch(batch: Any) -> None:
        t = time.perf_counter()
        Meter.on_batch(meter, batch)
        spent[0] += time.perf_counter() - t

    meter.on_batch = on_batch  # type: ignore[method-assign]
    handle = register_optimizer_step_post_hook(on_step)
    undo = counting_batches(meter)
    try:
        run_script(script)
    finally:
        handle.remove()
        undo()
    print(f"HOOKS {spent[0]:.6f} s in {spent[1]} steps", flush=True)
    return 0


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.hooked:
        return run_hooked(args.hooked)
    target = args.target if args.target is not None else (0.02 if args.device == "cuda" else 0.05)
    points = [(p.split(":")[0], int(p.split(":")[1])) for p in args.points]
    kinds = ("module", "script")
    runs: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {p: {k: [] for k in kinds} for p in points}
    for r in range(args.rounds):
        for dtype, batch in points:
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                out = trial(kind, dtype, batch, args)
                runs[(dtype, batch)][kind].append(out)
                shown = f"{out['samples_per_s']:,.1f} samples/s, peak {out['peak_memory_gib']:.2f} GiB" \
                    if out["status"] == "ok" else f"{out['status']}: {out.get('detail')}"
                print(f"round {r + 1}  {dtype:>8} batch {batch:>4}  {kind:>6}  {shown}", flush=True)
    first = next((o for p in runs.values() for k in kinds for o in p[k] if o["status"] == "ok"), {})
    print(f"\n{args.model}, seq_len {args.seq_len}, {args.warmup_steps} warm-up + at least {args.measure_steps} "
          f"measured steps and {args.min_measure_s:g} s per trial, {args.rounds} round(s), on "
          f"{first.get('device_name')} (torch {first.get('torch_version')}); target |script/module - 1| <= "
          f"{target:.0%}")
    print(f"{'precision':>9} {'batch':>5}  {'module samples/s':>20}  {'script samples/s':>20}  "
          f"{'script/module per round':>26}  {'median':>6}  verdict")
    table, failed = [], 0
    for (dtype, batch), by in runs.items():
        if not all(o["status"] == "ok" for k in kinds for o in by[k]):
            print(f"{dtype:>9} {batch:>5}  not measured: " + "; ".join(
                f"{k} {o['status']} ({o.get('detail')})" for k in kinds for o in by[k] if o["status"] != "ok"))
            failed += 1
            continue
        rates = {k: [o["samples_per_s"] for o in by[k]] for k in kinds}
        pairs = [s / m for m, s in zip(rates["module"], rates["script"])]
        med = statistics.median(pairs)
        verdict = "PASS" if abs(med - 1.0) <= target else "FAIL"
        failed += verdict == "FAIL"
        cell = {k: f"{statistics.median(rates[k]):,.1f} ±{spread(rates[k]) * 100:.1f}%" for k in kinds}
        print(f"{dtype:>9} {batch:>5}  {cell['module']:>20}  {cell['script']:>20}  "
              f"{' '.join(f'{x:.3f}' for x in pairs):>26}  {med:>6.3f}  {verdict}")
        table.append({"dtype": dtype, "batch": batch, "ratios": pairs, "median_ratio": med, "verdict": verdict,
                      "module": by["module"], "script": by["script"]})
    print("± = spread (max-min) over the rounds, % of the median")
    hooks: dict[str, Any] = {}
    if args.hook_pairs:
        bare, hooked, inside = [], [], []
        for i in range(args.hook_pairs):
            for flag in ((False, True) if i % 2 == 0 else (True, False)):
                value, per_step = timed_loop(args, flag)
                (hooked if flag else bare).append(value)
                if per_step is not None:
                    inside.append(per_step)
        pairs = [h / b for b, h in zip(bare, hooked) if b and h]
        if pairs and inside:
            med = statistics.median(pairs)
            step_s = int(args.hook_point.split(":")[1]) / statistics.median(b for b in bare if b)
            cost = statistics.median(inside) / step_s
            verdict = "PASS" if cost <= 0.01 else "FAIL"
            failed += verdict == "FAIL"
            print(f"\nhooks ({args.hook_point}, {args.hook_steps} timed steps, {len(pairs)} pairs): bare "
                  f"{', '.join(f'{b:,.1f}' for b in bare if b)} samples/s; hooked {', '.join(f'{h:,.1f}' for h in hooked if h)}; "
                  f"hooked/bare {' '.join(f'{x:.4f}' for x in pairs)}, median {med:.4f}")
            print(f"time inside the hooks: {statistics.median(inside) * 1e6:,.1f} us a step (median of the hooked runs) "
                  f"against a step of {step_s * 1e3:,.2f} ms (bare median): {cost:.4%} of the step time {verdict}")
            hooks = {"bare": bare, "hooked": hooked, "ratios": pairs, "median_ratio": med, "inside_s": inside,
                     "step_s": step_s, "cost": cost, "verdict": verdict}
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "points": table,
                                         "hooks": hooks}, indent=1))
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
