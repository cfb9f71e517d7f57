"""The machine's load before and during a sweep (``machineload``): readings, a run's summary, the
study's list of runs and the words the report prints."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator import machineload as L


def stat(tmp_path: Path, steal: int, total_rest: int) -> str:
    path = tmp_path / f"stat-{steal}-{total_rest}"
    path.write_text(f"cpu  {total_rest} 0 0 0 0 0 0 {steal} 0 0\ncpu0 1 2 3\n")
    return str(path)


def test_a_reading_has_the_load_average_and_on_linux_the_stolen_ticks(tmp_path: Path) -> None:
    r = L.read(stat(tmp_path, 5, 95))
    assert r.load1 == os.getloadavg()[0] or r.load1 is not None
    assert (r.steal, r.total) == (5, 100)
    assert L.read(str(tmp_path / "missing")).steal is None


def test_a_run_summary_has_the_load_before_and_during_and_the_share_stolen(tmp_path: Path) -> None:
    log = L.LoadLog(L.Reading(1000.0, 1.3, 10, 1000))
    log.during += [L.Reading(1010.0, 2.9, 20, 2000), L.Reading(1020.0, 15.0, 30, 3000),
                   L.Reading(1030.0, 6.8, 60, 5000)]
    s = log.summary()
    assert s["before"] == 1.3 and s["during"] == {"min": 2.9, "median": 6.8, "max": 15.0}
    assert s["readings"] == 3 and s["steal"] == round(50 / 4000, 4) and s["cores"] == os.cpu_count()
    text = L.describe({**s, "cores": 2})
    assert text == "load 1.3 before the sweep, 2.9-15.0 (median 6.8) during it, on 2 cores; 1% of the CPU time " \
                   "stolen by the hypervisor"
    assert L.busy({"before": 1.3, "cores": 2}) and not L.busy({"before": 0.2, "cores": 2})
    # one load during the sweep (or readings that round alike) is said once, not as a range
    assert L.describe({"before": 1.6, "during": {"min": 1.8, "median": 1.8, "max": 1.8}, "cores": 2}) == \
        "load 1.6 before the sweep, 1.8 during it, on 2 cores"


def test_the_study_keeps_the_last_ten_runs() -> None:
    runs = None
    for i in range(12):
        runs = L.kept(runs, {"at": i})
    assert [r["at"] for r in runs] == list(range(2, 12))
    assert L.kept("not a list", {"at": 1}) == [{"at": 1}]
