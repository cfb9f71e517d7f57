"""``experiments.hf`` (BERT built by transformers from its config) against ``experiments.bert`` (our
own BERT), both as a sweep runs them: each point a real trial through the harness.

    python bench/hf_vs_bert.py                                    # BERT-base, float32 b64 + bfloat16 b128, 3 rounds
    python bench/hf_vs_bert.py --device cpu --preset tiny --points float32:8 --rounds 1 --seq-len 32 \\
        --measure-steps 3 --min-measure-s 0                       # a smoke run on the CPU

Both get the same architecture (the preset; transformers' BertConfig fields set to it), dropout
0.1, the same masked-LM batches (``experiments.bert.make_batch``: ``experiments.hf`` uses it for
its masked LM), AdamW (fused on CUDA) and autocast for bfloat16; their parameter counts are
printed side by side. Each trial is ``python -m orchestrator.harness CONFIG`` in a fresh process
(the harness's warm-up, its synchronized timed window, its figures); each round runs every point
for both experiments, the order of the two swapped from round to round so that drift of the
machine falls on both alike. Per point: the median samples/s of each over the rounds, the spread
(min-max, % of the median), and hf/bert per round (paired) with its median. "Within the noise"
means that the paired ratios' range includes 1.0, or that the median ratio is closer to 1.0 than
either experiment's own spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.bert import PRESETS  # noqa: E402  (imports torch: this script is a trial-side tool)

EXPERIMENTS = ("experiments.bert", "experiments.hf")
SHORT = {"experiments.bert": "bert", "experiments.hf": "hf"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="bert-base", choices=sorted(PRESETS))
    p.add_argument("--points", nargs="+", default=["float32:64", "bfloat16:128"], metavar="DTYPE:BATCH")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--measure-steps", type=int, default=10)
    p.add_argument("--min-measure-s", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=300, help="seconds per trial")
    p.add_argument("--json", type=Path, help="write every trial's figures here")
    return p.parse_args(argv)


def hf_fields(preset: str) -> dict[str, Any]:
    """transformers' BertConfig fields for one of experiments.bert's presets (dropout 0.1 and
    LayerNorm eps 1e-12 are both libraries' defaults)."""
    c = PRESETS[preset]
    return {"model_type": "bert", "num_hidden_layers": c.num_layers, "hidden_size": c.hidden_size,
            "num_attention_heads": c.num_heads, "intermediate_size": c.intermediate_size,
            "vocab_size": c.vocab_size, "max_position_embeddings": c.max_position}


def trial(experiment: str, dtype: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """One real trial in a fresh process; its result file's figures, or its error."""
    own = {"model": args.preset} if experiment == "experiments.bert" else hf_fields(args.preset)
    params = {**own, "device": args.device, "seq_len": args.seq_len, "batch_size": batch, "dtype": dtype, "seed": 0}
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        config = {"experiment": experiment, "result_path": str(result_path), "params": params,
                  "trial": {"warmup_steps": args.warmup_steps, "measure_steps": args.measure_steps,
                            "min_measure_s": args.min_measure_s}}
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        try:
            proc = subprocess.run([sys.executable, "-m", "orchestrator.harness", str(Path(tmp) / "config.json")],
                                  capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"status": "timeout"}
        if not result_path.exists():
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            return {"status": "crashed", "detail": tail[-1] if tail else f"exit code {proc.returncode}"}
        result = json.loads(result_path.read_text())
    m = result.get("metrics", {})
    return {"status": result["status"], "detail": result.get("detail"), "samples_per_s": m.get("samples_per_s"),
            "peak_memory_gib": m.get("peak_memory_gib"), "step_time_ms_p50": m.get("step_time_ms_p50"),
            "num_parameters": result.get("info", {}).get("num_parameters"),
            "attn_implementation": result.get("info", {}).get("attn_implementation"),
            "transformers_version": result.get("info", {}).get("transformers_version"),
            "device_name": result.get("provenance", {}).get("device_name"),
            "torch_version": result.get("provenance", {}).get("torch_version")}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    points = [(p.split(":")[0], int(p.split(":")[1])) for p in args.points]
    runs: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {p: {e: [] for e in EXPERIMENTS} for p in points}
    for r in range(args.rounds):
        order = EXPERIMENTS if r % 2 == 0 else EXPERIMENTS[::-1]
        for dtype, batch in points:
            for experiment in order:
                out = trial(experiment, dtype, batch, args)
                runs[(dtype, batch)][experiment].append(out)
                shown = f"{out['samples_per_s']:,.1f} samples/s, peak {out['peak_memory_gib']:.2f} GiB" \
                    if out["status"] == "ok" else f"{out['status']}: {out.get('detail')}"
                print(f"round {r + 1}  {dtype:>8} batch {batch:>4}  {SHORT[experiment]:>4}  {shown}", flush=True)

    first = next((o for p in runs.values() for e in EXPERIMENTS for o in p[e] if o["status"] == "ok"), {})
    params = {SHORT[e]: next((o["num_parameters"] for p in runs.values() for o in p[e] if o.get("num_parameters")), None)
              for e in EXPERIMENTS}
    hf_attn = next((o["attn_implementation"] for p in runs.values() for o in p["experiments.hf"]
                    if o.get("attn_implementation")), None)
    print(f"\n{args.preset}, seq_len {args.seq_len}, {args.warmup_steps} warm-up + at least {args.measure_steps} "
          f"measured steps and {args.min_measure_s:g} s per trial, {args.rounds} round(s), on "
          f"{first.get('device_name')} (torch {first.get('torch_version')}, transformers "
          f"{next((o['transformers_version'] for p in runs.values() for o in p['experiments.hf'] if o.get('transformers_version')), None)}, "
          f"hf attention {hf_attn})")
    print(f"parameters: bert {params['bert']:,}, hf {params['hf']:,}" if None not in params.values()
          else f"parameters: {params}")
    print(f"{'precision':>9} {'batch':>5}  {'bert samples/s':>22}  {'hf samples/s':>22}  {'hf/bert per round':>24}  "
          f"{'median':>6}  {'bert GiB':>8} {'hf GiB':>7}  verdict")
    table = []
    for (dtype, batch), by in runs.items():
        ok = {e: [o for o in by[e] if o["status"] == "ok"] for e in EXPERIMENTS}
        if not all(ok.values()):
            print(f"{dtype:>9} {batch:>5}  not measured: " + "; ".join(
                f"{SHORT[e]} {o['status']}" for e in EXPERIMENTS for o in by[e] if o["status"] != "ok"))
            continue
        rates = {e: [o["samples_per_s"] for o in ok[e]] for e in EXPERIMENTS}
        pairs = [h["samples_per_s"] / b["samples_per_s"] for b, h in zip(by["experiments.bert"], by["experiments.hf"])
                 if b["status"] == h["status"] == "ok"]
        med = statistics.median(pairs)
        noise = max(spread(rates[e]) for e in EXPERIMENTS)
        within = min(pairs) <= 1.0 <= max(pairs) or abs(med - 1.0) <= noise
        cell = {e: f"{statistics.median(rates[e]):,.1f} ±{spread(rates[e]) * 100:.1f}%" for e in EXPERIMENTS}
        mem = {e: statistics.median(o["peak_memory_gib"] for o in ok[e]) for e in EXPERIMENTS}
        print(f"{dtype:>9} {batch:>5}  {cell['experiments.bert']:>22}  {cell['experiments.hf']:>22}  "
              f"{' '.join(f'{x:.3f}' for x in pairs):>24}  {med:>6.3f}  {mem['experiments.bert']:>8.2f} "
              f"{mem['experiments.hf']:>7.2f}  {'within the noise' if within else 'DIFFERENT'}")
        table.append({"dtype": dtype, "batch": batch, "ratios": pairs, "median_ratio": med, "within_noise": within,
                      "bert": by["experiments.bert"], "hf": by["experiments.hf"]})
    print("± = spread (max-min) over the rounds, % of the median; peak = the harness's peak_memory_gib "
          "(CUDA: reserved)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "points": table}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
