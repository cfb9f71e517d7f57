"""The batch's prior against what the recorded landscapes show: on each device the median effect
of doubling the batch (log throughput, between neighbouring batches of one column) lies within
1.5 spreads of the prior's mean. A new landscape that a device's prior does not cover fails here."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from orchestrator.replay.landscape import load_landscape
from orchestrator.search.priors import PRIORS, SEVERAL_DEVICES, _slope

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPES = sorted((ROOT / "bench" / "landscapes").glob("*.csv"))


def doubling_effects(path: Path) -> list[float]:
    land = load_landscape(path)
    columns: dict[tuple, list[tuple[int, float]]] = {}
    for row in land.rows.values():
        if row.status == "ok" and row.samples_per_s:
            rest = tuple(sorted((k, str(v)) for k, v in row.params.items() if k != "batch_size"))
            columns.setdefault(rest, []).append((row.params["batch_size"], row.samples_per_s))
    effects = []
    for points in columns.values():
        points.sort()
        effects += [math.log(t2 / t1) / math.log2(b2 / b1) for (b1, t1), (b2, t2) in zip(points, points[1:])]
    return effects


@pytest.mark.parametrize("path", LANDSCAPES, ids=lambda p: p.stem)
def test_the_batch_prior_covers_each_recorded_landscape(path: Path) -> None:
    device = load_landscape(path).device
    mean, spread = PRIORS["batch_size"][device]
    median = statistics.median(doubling_effects(path))
    assert abs(median - mean) <= 1.5 * spread, (device, round(median, 2), (mean, spread))


def test_the_batch_prior_is_the_devices_and_a_swept_device_gets_one_covering_both() -> None:
    assert _slope("batch_size", "samples_per_s", "cuda", True) == PRIORS["batch_size"]["cuda"]
    assert _slope("batch_size", "samples_per_s", "cpu", True) == PRIORS["batch_size"]["cpu"]
    assert _slope("batch_size", "samples_per_s", "swept", True) == SEVERAL_DEVICES
    low = min(m - s for m, s in (PRIORS["batch_size"]["cpu"], PRIORS["batch_size"]["cuda"]))
    high = max(m + s for m, s in (PRIORS["batch_size"]["cpu"], PRIORS["batch_size"]["cuda"]))
    assert SEVERAL_DEVICES[0] - SEVERAL_DEVICES[1] <= low + 0.05 and SEVERAL_DEVICES[0] + SEVERAL_DEVICES[1] >= high - 0.05
