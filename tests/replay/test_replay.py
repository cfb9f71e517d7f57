"""Replaying a recorded landscape through the real sweep loop (no training, no subprocess)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

from orchestrator.protocol import TrialConfig, TrialSteps
from orchestrator.replay.landscape import LandscapeError, load_landscape
from orchestrator.replay.strategies import (NullTracker, ReplayLauncher, ReplayedTrial,
                                 landscape_spec, lightning_pick, lightning_search,
                                 replay_sweep, time_to_band)

ROOT = Path(__file__).resolve().parents[2]

# 4 batch sizes x 2 precisions; float32 runs out of memory from batch 64, bfloat16 at 128.
SMALL = """\
batch_size,dtype,status,samples_per_s,peak_memory_gib,duration_s
16,float32,ok,100.0,1.0,2.0
16,bfloat16,ok,150.0,0.8,2.5
32,float32,ok,120.0,1.9,3.0
32,bfloat16,ok,210.0,1.5,3.5
64,float32,oom,,,1.0
64,bfloat16,ok,260.0,2.9,4.0
128,float32,oom,,,1.25
128,bfloat16,oom,,,1.5
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text(SMALL)
    return path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "landscape.csv"
    path.write_text(textwrap.dedent(text))
    return path


def test_columns_get_their_types(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        batch_size,lr,dtype,activation_checkpointing,status,samples_per_s,peak_memory_gib,duration_s
        8,0.001,float32,true,ok,10.5,0.5,1.0
        16,0.01,bfloat16,False,oom,,,2.0
        """)
    land = load_landscape(path)
    assert land.columns == ("batch_size", "lr", "dtype", "activation_checkpointing")
    first, second = land.rows.values()
    assert first.params == {"batch_size": 8, "lr": 0.001, "dtype": "float32", "activation_checkpointing": True}
    assert type(first.params["batch_size"]) is int and type(first.params["lr"]) is float
    assert second.params["activation_checkpointing"] is False
    assert (second.status, second.samples_per_s, second.peak_memory_gib, second.duration_s) == ("oom", None, None, 2.0)
    assert land.best_feasible() == 10.5


@pytest.mark.parametrize("text, message", [
    ("batch_size,status,samples_per_s,duration_s\n8,ok,1,1\n", "missing column(s) peak_memory_gib"),
    ("batch_size,status,samples_per_s,peak_memory_gib,duration_s\n8,skipped,,,0\n",
     "landscape.csv:2: status must be one of ok, oom"),
    ("batch_size,status,samples_per_s,peak_memory_gib,duration_s\n8,ok,fast,1,1\n",
     "landscape.csv:2: samples_per_s: must be a number or empty, got 'fast'"),
    ("batch_size,status,samples_per_s,peak_memory_gib,duration_s\n8,ok,1,1,\n",
     "landscape.csv:2: duration_s must be a number >= 0, got ''"),
    ("batch_size,status,samples_per_s,peak_memory_gib,duration_s\n8,ok,1,1,1\n8,oom,,,1\n",
     "landscape.csv:3: configuration {'batch_size': 8} appears twice"),
])
def test_bad_tables_are_refused_with_the_row(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LandscapeError) as info:
        load_landscape(write(tmp_path, text))
    assert message in str(info.value)


def _config(params: dict) -> TrialConfig:
    """What the sweep sends a trial (the replay reads its parameters alone)."""
    return TrialConfig("experiments.bert", params, TrialSteps(warmup_steps=1, measure_steps=1, min_measure_s=0.0))


def test_the_launcher_answers_a_recorded_row_and_touches_no_disk(small: Path, tmp_path: Path) -> None:
    launcher = ReplayLauncher(load_landscape(small))
    config = _config({"batch_size": 32, "dtype": "bfloat16", "device": "cpu", "model": "tiny"})
    trial_dir = tmp_path / "trial-0000"
    launched = launcher(config, trial_dir, {}, 60.0, None)
    assert launched.outcome.status == "ok"
    assert launched.outcome.metrics == {"samples_per_s": 210.0, "peak_memory_gib": 1.5}
    assert launched.duration_s == 3.5
    oom = launcher(_config({"batch_size": 64, "dtype": "float32", "device": "cpu"}), trial_dir, {}, 60.0)
    assert (oom.outcome.status, oom.outcome.metrics, oom.duration_s) == ("oom", {}, 1.0)
    assert not trial_dir.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["small.csv"]
    assert launcher.calls == [{"batch_size": 32, "dtype": "bfloat16"}, {"batch_size": 64, "dtype": "float32"}]


def test_an_unknown_configuration_is_an_error(small: Path, tmp_path: Path) -> None:
    launcher = ReplayLauncher(load_landscape(small))
    with pytest.raises(LandscapeError, match=r"no recorded result for \{'batch_size': 48, 'dtype': 'float32'\}"):
        launcher(_config({"batch_size": 48, "dtype": "float32"}), tmp_path / "t", {}, 60.0)
    with pytest.raises(LandscapeError, match=r"lacks the landscape's column\(s\) dtype"):
        launcher(_config({"batch_size": 16}), tmp_path / "t", {}, 60.0)


def test_the_null_tracker_answers_what_the_sweep_asks() -> None:
    tracker = NullTracker()
    assert tracker.start_trial(3, {"batch_size": 8}, {}) == "replay-3"
    assert tracker.finish_trial("replay-3", "ok", {}, {}, []) is None
    assert tracker.trial_runs() == {}


def test_grid_with_skipping_records_skips_at_no_cost_and_never_launches_them(
        small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    land = load_landscape(small)
    launcher = ReplayLauncher(land)
    records = replay_sweep(landscape_spec(land), land, seed=0, skip=True, launcher=launcher)
    # spec order: batch_size outer, dtype inner; 128/float32 needs at least what 64/float32 did
    assert [(r.params["batch_size"], r.params["dtype"], r.status) for r in records] == [
        (16, "float32", "ok"), (16, "bfloat16", "ok"), (32, "float32", "ok"), (32, "bfloat16", "ok"),
        (64, "float32", "oom"), (64, "bfloat16", "ok"), (128, "float32", "skipped"), (128, "bfloat16", "oom")]
    skipped = records[6]
    assert skipped.cost_s == 0.0 and not skipped.measured
    assert {"batch_size": 128, "dtype": "float32"} not in launcher.calls and len(launcher.calls) == 7
    assert sum(r.cost_s for r in records) == land.total_duration_s() - 1.25
    assert [r.samples_per_s for r in records[:2]] == [100.0, 150.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.csv"]  # no mlruns, no trial folders


def test_grid_without_skipping_runs_every_row(small: Path) -> None:
    land = load_landscape(small)
    records = replay_sweep(landscape_spec(land), land, seed=0, skip=False)
    assert all(r.measured for r in records) and len(records) == 8
    assert sum(r.cost_s for r in records) == land.total_duration_s()


def test_tpe_replay_is_repeatable_and_repeats_cost_nothing(small: Path) -> None:
    land = load_landscape(small)
    spec = {**landscape_spec(land), "search": {"sampler": "tpe"}}
    first = replay_sweep(spec, land, seed=3, skip=True)
    assert first == replay_sweep(spec, land, seed=3, skip=True)
    covered = {(r.params["batch_size"], r.params["dtype"]) for r in first if r.repeat_of is None}
    assert len(covered) == 8  # the study ends when every configuration has a result
    repeats = [r for r in first if r.repeat_of is not None]
    assert all(r.cost_s == 0.0 and not r.measured and r.samples_per_s is None for r in repeats)


def test_lightning_doubles_until_oom_per_precision_then_picks_the_fastest(small: Path) -> None:
    records = lightning_search(load_landscape(small))
    assert [(r.params["dtype"], r.params["batch_size"], r.status) for r in records] == [
        ("float32", 16, "ok"), ("float32", 32, "ok"), ("float32", 64, "oom"),
        ("bfloat16", 16, "ok"), ("bfloat16", 32, "ok"), ("bfloat16", 64, "ok"), ("bfloat16", 128, "oom")]
    pick = lightning_pick(records)
    assert pick is not None and (pick.params["batch_size"], pick.params["dtype"], pick.samples_per_s) == (64, "bfloat16", 260.0)
    assert sum(r.cost_s for r in records) == 2.0 + 3.0 + 1.0 + 2.5 + 3.5 + 4.0 + 1.5


def test_lightning_holds_other_knobs_at_their_default(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        batch_size,dtype,activation_checkpointing,status,samples_per_s,peak_memory_gib,duration_s
        8,float32,true,ok,5,1,1
        8,float32,false,ok,6,1,1
        16,float32,true,ok,9,1,1
        16,float32,false,oom,,,1
        """)
    records = lightning_search(load_landscape(path))
    assert [(r.params["batch_size"], r.params["activation_checkpointing"]) for r in records] == [(8, False), (16, False)]
    assert lightning_pick(records).params["batch_size"] == 8  # type: ignore[union-attr]


def test_lightning_steps_to_the_next_listed_batch_on_a_sparse_list(tmp_path: Path) -> None:
    """On 64, 256, 1024 (x4 steps) twice the batch is never listed: the next larger listed batch
    stands for Lightning's next doubling (it used to stop after the first batch)."""
    path = write(tmp_path, """\
        batch_size,dtype,status,samples_per_s,peak_memory_gib,duration_s
        64,float32,ok,10,1,1
        256,float32,ok,30,2,1
        1024,float32,ok,50,4,1
        """)
    records = lightning_search(load_landscape(path))
    assert [r.params["batch_size"] for r in records] == [64, 256, 1024]
    assert lightning_pick(records).params["batch_size"] == 1024  # type: ignore[union-attr]


def record(number: int, status: str, sps: float | None, cost: float, repeat_of: int | None = None) -> ReplayedTrial:
    return ReplayedTrial(number, {"batch_size": number}, status, sps, cost, repeat_of)


def test_time_to_band_counts_only_measured_trials() -> None:
    records = [record(0, "ok", 90.0, 2.0), record(1, "oom", None, 1.0), record(2, "skipped", None, 0.0),
               record(3, "ok", None, 0.0, repeat_of=0), record(4, "ok", 97.0, 3.0), record(5, "ok", 99.0, 4.0)]
    hit = time_to_band(records, 96.0)
    assert hit is not None and (hit.trials, hit.asked, hit.cost_s) == (3, 5, 6.0)
    assert time_to_band(records, 99.0).cost_s == 10.0  # type: ignore[union-attr]  # threshold inclusive
    assert time_to_band(records, 99.5) is None


def test_a_repeat_of_a_band_configuration_does_not_count() -> None:
    records = [record(0, "ok", 80.0, 1.0), record(1, "ok", 100.0, 0.0, repeat_of=7)]
    assert time_to_band(records, 98.0) is None


def test_export_writes_what_replay_reads(tmp_path: Path) -> None:
    import optuna
    from optuna.trial import TrialState

    url = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="land", storage=url, direction="maximize")
    rows = [({"batch_size": 8, "activation_checkpointing": False}, "ok", 50.0, 4.5),
            ({"batch_size": 8, "activation_checkpointing": True}, "ok", 40.0, 15.0),  # 3 repeats
            ({"batch_size": 16, "activation_checkpointing": False}, "oom", None, 2.0),
            ({"batch_size": 16, "activation_checkpointing": False}, "interrupted", None, 1.0),
            ({"batch_size": 8, "activation_checkpointing": False}, "ok", 50.0, 0.0)]  # a repeat
    dists = {"batch_size": optuna.distributions.CategoricalDistribution([8, 16]),
             "activation_checkpointing": optuna.distributions.CategoricalDistribution([False, True])}
    for i, (params, status, sps, duration) in enumerate(rows):
        attrs = {"status": status, "duration_s": duration,
                 "metrics": {"samples_per_s": sps, "peak_memory_gib": 0.5} if sps else {}}
        if i == 1:
            attrs["processes"] = 3  # measured in 3 processes: one measurement cost 15.0 / 3
        if i == 4:
            attrs = {"status": "ok", "repeat_of": 0}
        state = TrialState.COMPLETE if status == "ok" else TrialState.FAIL
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, user_attrs=attrs,
                                                  state=state, value=sps if state == TrialState.COMPLETE else None))
    spec = importlib.util.spec_from_file_location("export_landscape", ROOT / "bench" / "export_landscape.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    out = tmp_path / "land.csv"
    assert module.main([url, "land", str(out)]) == 0
    assert out.read_text().splitlines() == [
        "batch_size,activation_checkpointing,status,samples_per_s,peak_memory_gib,duration_s",
        "8,false,ok,50.0,0.5,4.5", "8,true,ok,40.0,0.5,5.0", "16,false,oom,,,2.0"]
    land = load_landscape(out)
    assert land.row({"batch_size": 8, "activation_checkpointing": True}).samples_per_s == 40.0



def test_a_proposal_that_has_a_result_queues_its_nearest_unmeasured_neighbour(small: Path) -> None:
    """A sampler that keeps proposing 32/float32 (as an exploiting TPE does) gets it answered from
    the record, and the sweep measures the nearest configuration that has no result and is not
    predicted to run out of memory instead: a local refinement, never a second measurement."""
    import optuna

    from orchestrator.search.dominance import DEFAULT_ORDER, predicted_oom
    from orchestrator.search.space import config_key, distance, make_plan
    from orchestrator.spec.load import check_spec
    from orchestrator.replay.strategies import REPLAY_PATH

    class Insistent(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, name, distribution):  # noqa: ANN001, ANN201
            return {"batch_size": 32, "dtype": "float32"}[name]

    land = load_landscape(small)
    spec = {**landscape_spec(land), "search": {"sampler": "tpe", "n_trials": 6}}
    records = replay_sweep(spec, land, 0, True, sampler=Insistent(seed=0))
    plan = make_plan(check_spec({**spec, "search": {"sampler": "tpe"}}, REPLAY_PATH, {}), "cpu")
    home = {"batch_size": 32, "dtype": "float32"}
    assert (records[0].params, records[0].status, records[0].repeat_of) == (home, "ok", None)
    measured: dict[str, dict] = {config_key(home): home}
    ooms: list[tuple[int, dict]] = []
    neighbours = 0
    for before, r in zip(records, records[1:]):
        if r.repeat_of is not None:
            assert r.params == home and r.repeat_of == 0     # answered from the record, not run
            continue
        assert before.repeat_of == 0                         # queued because of that repeat
        left = [row.params for row in land.rows.values() if config_key(row.params) not in measured
                and predicted_oom(row.params, ooms, DEFAULT_ORDER) is None]
        assert r.params in left
        assert distance(home, r.params, plan) == min(distance(home, c, plan) for c in left)
        measured[config_key(r.params)] = r.params
        if r.status == "oom":
            ooms.append((r.number, r.params))
        neighbours += 1
    assert neighbours == 5 and len(measured) == 6            # n_trials results, each measured once
