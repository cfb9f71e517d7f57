"""What one decision of the ``auto`` search costs on a big space (issue #27 item 4).

    taskset -c 0 python bench/planner_cost.py            # one core, as the targets are stated
    python bench/planner_cost.py --results 200 --repeat 3

For each synthetic landscape (``bench/synthetic_landscape.py`` writes them into
``bench/landscapes/scale/``), a fresh planner is given ``--results`` configurations drawn at random
(seeded) with their recorded results, as a study would hold them, and asked for its next
configuration and verdict: the planner's construction (once per sweep) and the decision (once per
trial) are timed separately, the median of ``--repeat`` decisions on fresh planners. The whole
sweep's cost against its simulated trial time (``wall_s / sim_s``) is ``search_efficiency.py``'s
``--json`` on the same landscapes. Target: a decision over 10,000 configurations with 200
results in at most 1 s on one core.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.replay.landscape import load_landscape  # noqa: E402
from orchestrator.search.dominance import DEFAULT_ORDER  # noqa: E402
from orchestrator.search.planner import Planner  # noqa: E402
from orchestrator.search.space import config_key  # noqa: E402

SCALE = ROOT / "bench" / "landscapes" / "scale"
TARGET_S = 1.0


def study_results(land, n: int, seed: int) -> dict[str, SimpleNamespace]:
    rows = list(land.rows.values())
    picked = random.Random(seed).sample(rows, min(n, len(rows)))
    out = {}
    for r in picked:
        metrics = {"samples_per_s": r.samples_per_s, "peak_memory_gib": r.peak_memory_gib}
        out[config_key(r.params)] = SimpleNamespace(user_attrs={"status": r.status, "metrics": metrics},
                                                    values=[r.samples_per_s] if r.status == "ok" else None)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("landscapes", nargs="*", type=Path, help="default: bench/landscapes/scale/*.csv")
    p.add_argument("--results", type=int, default=200, help="results the study holds (default 200)")
    p.add_argument("--repeat", type=int, default=3, help="decisions timed, each on a fresh planner (default 3)")
    args = p.parse_args(argv)
    paths = args.landscapes or sorted(SCALE.glob("*.csv"), key=lambda q: len(q.read_text()))
    print(f"{'landscape':<26} {'configs':>8} {'results':>8} {'build s':>8} {'decide s':>9}  target")
    ok_all = True
    for path in paths:
        land = load_landscape(path)
        configs = [dict(r.params) for r in land.rows.values()]
        builds, decides = [], []
        for k in range(args.repeat):
            results = study_results(land, args.results, seed=k)
            t0 = time.perf_counter()
            planner = Planner(configs, {}, "samples_per_s", "maximize", land.device, dict(DEFAULT_ORDER),
                              cap_gib=land.memory_limit_gib)
            t1 = time.perf_counter()
            planner.decide(results, set())
            t2 = time.perf_counter()
            builds.append(t1 - t0)
            decides.append(t2 - t1)
        decide = statistics.median(decides)
        line = ""
        if len(configs) >= 10_000:
            ok = decide <= TARGET_S
            ok_all &= ok
            line = f"{'PASS' if ok else 'FAIL'} <= {TARGET_S:g} s"
        print(f"{path.name:<26} {len(configs):>8,} {len(results):>8} {statistics.median(builds):>8.2f} "
              f"{decide:>9.3f}  {line}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
