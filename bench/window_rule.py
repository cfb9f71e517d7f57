"""What asking ``trial.precision``'s rule costs the steps it times (``harness/window.py``): a
real script trial (a tiny loop of sub-millisecond steps, the worst case: the rule's work is
largest next to the steps) run with the rule asked all along but never met (``precision``
1e-9) against the same trial without a precision, alternating.

    python bench/window_rule.py                   # 5 rounds of 3,000 measured steps each way
    python bench/window_rule.py --rounds 3 --steps 10000
    python bench/window_rule.py --rounds 0        # only the rule under noise (below)

Prints each round's throughput and median step both ways, and the median of the paired ratios.
Then the rule under noise, simulated: the headline's windows (10 steps, precision 0.005) of steps
whose times spread by a CV from 0.1% to 30% (log-normal, 4,000 windows each): how often a window
closes before its 10 steps, and how far its throughput is from the steps' true rate.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "harness")]

from orchestrator.harness.window import StepTimes, closes  # noqa: E402
from orchestrator.protocol import TrialSteps  # noqa: E402
from test_script import LOOP, run_trial  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3000, help="measured steps a window holds")
    args = ap.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            got = {}
            for way, precision in (("without", None), ("asked", 1e-9)):
                folder = Path(tmp) / f"{r}-{way}"
                folder.mkdir()
                _, result = run_trial(folder, LOOP, ["4", "1"], TrialSteps(2, args.steps, 0.0, precision))
                m = result["metrics"]
                assert m["measure_steps_done"] == args.steps, m  # never met: the whole window, both ways
                got[way] = m
            ratio = got["asked"]["samples_per_s"] / got["without"]["samples_per_s"]
            ratios.append(ratio)
            print(f"round {r + 1}: without {got['without']['samples_per_s']:,.0f} samples/s "
                  f"(median step {got['without']['step_time_ms_p50']:.3f} ms), the rule asked "
                  f"{got['asked']['samples_per_s']:,.0f} ({got['asked']['step_time_ms_p50']:.3f} ms): {ratio:.3f}",
                  flush=True)
    if ratios:
        print(f"asked over without, median of {args.rounds} rounds: {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")
    under_noise()
    return 0


def under_noise(windows: int = 4000, step_s: float = 0.1) -> None:
    """The headline's rule (10 steps, precision 0.005) on simulated windows, by the steps' CV."""
    trial = TrialSteps(3, 10, 0.0, 0.005)
    print("step CV   closed before 10 steps   throughput error: median, 95th percentile")
    for cv in (0.001, 0.002, 0.003, 0.01, 0.10, 0.30):
        early, errors = 0, []
        for seed in range(windows):
            rng = random.Random(seed)
            ends = [0.0]
            for _ in range(trial.measure_steps):
                ends.append(ends[-1] + step_s * math.exp(rng.gauss(0, cv)))
            times, held = StepTimes([]), trial.measure_steps
            for k in range(1, trial.measure_steps + 1):
                times.marks = ends[:k + 1]
                if closes(k, 1e9, trial, times):
                    held = k
                    break
            early += held < trial.measure_steps
            errors.append(abs(math.log(held * step_s / ends[held])))
        errors.sort()
        print(f"{cv:7.1%}   {early / windows:22.1%}   {errors[len(errors) // 2]:.2%}, {errors[int(0.95 * len(errors))]:.2%}")


if __name__ == "__main__":
    sys.exit(main())
