"""A new Optuna study database is a copy of the first one this Optuna version built
(``orchestrator/store/templates.py``, issue #29): real Optuna, real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest

from orchestrator.store.study import create_sqlite_atomically, new_database
from orchestrator.store.templates import cache_dir

TEMPLATE = f"optuna-{optuna.__version__}-empty.db"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "orchestrate"


def new_study(db: Path, name: str = "s") -> optuna.Study:
    url = f"sqlite:///{db}"
    create_sqlite_atomically(url, lambda at: new_database(at, {}))
    study = optuna.create_study(study_name=name, storage=url)
    study.tell(study.ask({"x": optuna.distributions.FloatDistribution(0, 1)}), 1.0)
    return study


def test_the_first_database_is_kept_and_the_next_ones_are_copies_that_work(tmp_path: Path, cache: Path) -> None:
    first = new_study(tmp_path / "a.db")
    template = cache_dir() / TEMPLATE
    assert template.is_relative_to(cache) and template.is_file()
    kept = template.stat().st_mtime_ns
    second = new_study(tmp_path / "b.db", "other")
    assert template.stat().st_mtime_ns == kept, "the template was built again"
    for study in (first, second):
        assert [t.value for t in optuna.load_study(study_name=study.study_name, storage=study._storage).trials] == [1.0]
    con = sqlite3.connect(tmp_path / "b.db")  # nothing of the first database's study in the copy
    assert con.execute("SELECT study_name FROM studies").fetchall() == [("other",)]
    con.close()
    assert not [p.name for p in tmp_path.iterdir() if ".init-" in p.name]


def test_a_template_that_cannot_be_trusted_is_rebuilt_and_no_cache_still_gives_a_database(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    (cache / TEMPLATE).write_bytes(b"not a database\n" * 100)
    new_study(tmp_path / "a.db")
    con = sqlite3.connect(cache / TEMPLATE)  # Optuna built the database, and its build replaced the junk
    assert con.execute("SELECT count(*) FROM studies").fetchone() == (0,)
    con.close()
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no cache to keep a template in
    assert new_study(tmp_path / "b.db").trials[0].value == 1.0


def test_two_first_runs_in_one_folder_make_one_store_and_spare_each_other_s(tmp_path: Path) -> None:
    """The fault tour: three first runs started together in one folder (three studies, the default
    stores) failed 3 times in 3: one deleted another's temporary store (``FileNotFoundError`` on
    its rename), or renamed its own over a store another had already opened."""
    import subprocess
    import sys

    path = tmp_path / "optuna.db"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = tmp_path / f".optuna.db.init-{sleeper.pid}"  # a run making its own, still alive
        theirs.write_text("in the making")
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        stale = tmp_path / f".optuna.db.init-{dead.stdout.strip()}"  # a run killed while making it
        stale.write_text("left behind")

        def init(at: str) -> None:  # another run's store lands while ours is made
            new_database(at, {})
            new_database(f"sqlite:///{path}", {})
            with sqlite3.connect(path) as con:
                con.execute("CREATE TABLE theirs (x)")

        create_sqlite_atomically(f"sqlite:///{path}", init)
        assert theirs.exists() and not stale.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    with sqlite3.connect(path) as con:  # theirs kept, not replaced by ours
        assert con.execute("SELECT name FROM sqlite_master WHERE name = 'theirs'").fetchone()
    assert sorted(p.name for p in tmp_path.iterdir()) == [theirs.name, "optuna.db"]
