"""Where several slots' trials made their CUDA context, read from ``bench/devices.py --json`` files
(``session.sh early41``): per file and way (one GPU, several), the trials, how many made the
context or started the driver inside the trial (``config_received`` to ``device_ready`` over 0.05 s),
that time's mean and median, the set-up to the window (``config_received`` to ``window_start``) and
the loop's and command's seconds.

    python3 docs/gpu/early/contexts.py OUT/*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(paths: list[str]) -> None:
    for path in paths:
        data = json.loads(Path(path).read_text())
        for way in data.get("ways", {}).values():
            for sweep in way.get("sweeps", []):
                marks = [t["marks"] for t in sweep.get("timeline", [])
                         if {"config_received", "device_ready", "window_start"} <= set(t.get("marks") or {})]
                if not marks:
                    continue
                ctx = [m["device_ready"] - m["config_received"] for m in marks]
                setup = [m["window_start"] - m["config_received"] for m in marks]
                print(f"{Path(path).stem:10s} {sweep['way']:8s} round {sweep['round']}: {len(marks):2d} trials, "
                      f"in-trial device {sum(c > 0.05 for c in ctx):2d} (mean {statistics.mean(ctx):.3f} s, "
                      f"median {statistics.median(ctx):.3f} s), to the window mean {statistics.mean(setup):.2f} s; "
                      f"loop {sweep['loop_s']:.1f} s, command {sweep['wall_s']:.1f} s, {sweep['configurations']} configurations")


if __name__ == "__main__":
    main(sys.argv[1:])
