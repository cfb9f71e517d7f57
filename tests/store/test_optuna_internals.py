"""orchestrator/store/optuna_internals.py against the installed Optuna: each use of a private name
does what its caller relies on, on a real SQLite study (with heartbeats, as a server database's
storage keeps them), through the same wrappers ``store.study`` puts around the storage. An Optuna
upgrade that moves one of these names fails here, by name."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store import optuna_internals as door

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning",
                                        "ignore:Heartbeat of storage is supposed to be used")

def heartbeat_storage(url: str, grace_s: int = 1) -> Any:
    """Optuna's RDB storage with heartbeats, behind its cache and the orchestrator's retrying
    wrapper: what ``store.study`` gives a study on a server database."""
    import optuna

    from orchestrator.store.outage import Outage, retrying_storage

    rdb = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=grace_s)
    return retrying_storage(door.cached(rdb), Outage("the test's study", 5.0))


@pytest.fixture
def study(tmp_path: Path) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="door", storage=heartbeat_storage(f"sqlite:///{tmp_path}/optuna.db"),
                               direction="maximize")


def test_storage_and_ids_are_the_ones_the_storage_answers_to(study: Any) -> None:
    storage = door.storage_of(study)
    assert type(storage).__name__ == "RetryingStorage"  # the storage the study was given, not a copy
    assert storage.get_study_id_from_name("door") == door.study_id(study)
    asked = [study.ask() for _ in range(3)]
    for trial in asked:  # an optuna.Trial, and the FrozenTrial read back: the same storage id
        assert storage.get_trial(door.trial_id(trial)).number == trial.number
    frozen = study.get_trials(deepcopy=False)
    assert [door.trial_id(t) for t in frozen] == [door.trial_id(t) for t in asked]
    assert len({door.trial_id(t) for t in frozen}) == 3


def test_trial_of_sets_attributes_on_a_stored_running_trial(study: Any) -> None:
    study.ask()
    frozen = study.get_trials(deepcopy=False)[0]
    live = door.trial_of(study, frozen)
    live.set_user_attr("seen", 1)
    assert live.number == frozen.number
    assert study.get_trials(deepcopy=False)[0].user_attrs == {"seen": 1}


def test_heartbeats_are_seen_through_the_wrappers(tmp_path: Path) -> None:
    import optuna

    plain = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/plain.db")
    assert not door.heartbeat_enabled(door.cached(plain))
    wrapped = heartbeat_storage(f"sqlite:///{tmp_path}/beats.db")
    assert door.heartbeat_enabled(wrapped)
    assert isinstance(wrapped, door.heartbeat_base()) and isinstance(door.cached(plain), door.heartbeat_base())


def test_stale_trial_ids_are_the_running_trials_whose_heartbeat_is_older_than_the_grace(study: Any) -> None:
    storage = door.storage_of(study)
    alive, dead, never = study.ask(), study.ask(), study.ask()
    for trial in (alive, dead):
        storage.record_heartbeat(door.trial_id(trial))
    assert door.stale_trial_ids(study) == []  # within the grace period
    time.sleep(2.5)  # grace_period=1 s: Optuna compares whole seconds
    storage.record_heartbeat(door.trial_id(alive))
    assert door.stale_trial_ids(study) == [door.trial_id(dead)]  # a trial never beaten is not stale to Optuna
    assert door.trial_id(never) not in door.stale_trial_ids(study)


def test_the_engine_is_found_behind_the_wrappers(tmp_path: Path) -> None:
    import optuna

    rdb = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/e.db")
    from orchestrator.store.outage import Outage, retrying_storage

    assert door.engine_of(retrying_storage(door.cached(rdb), Outage("x", 1.0))) is rdb.engine
    assert door.engine_of(door.cached(rdb)) is rdb.engine
    assert door.engine_of(optuna.storages.InMemoryStorage()) is None


def test_import_storage_imports_the_rdb_models() -> None:
    code = ("import sys; from orchestrator.store.optuna_internals import import_storage; "
            "before = 'optuna.storages._rdb.models' in sys.modules; import_storage(); "
            "print(before, 'optuna.storages._rdb.models' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_version_checked_is_the_one_installed_and_pinned() -> None:
    """A new Optuna (within the pin) runs these tests; say so in ``CHECKED_WITH`` once they pass."""
    import optuna

    from conftest import ROOT

    assert optuna.__version__.split(".")[0] == door.CHECKED_WITH.split(".")[0] == "5"
    assert '"optuna>=5,<6"' in (ROOT / "pyproject.toml").read_text()
