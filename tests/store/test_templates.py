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
