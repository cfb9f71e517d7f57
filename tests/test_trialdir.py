"""``trialdir``: the trial folder's layout, the one place its names are spelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import trialdir


@pytest.mark.parametrize(("number", "name"), [(0, "trial-0000"), (7, "trial-0007"), (12345, "trial-12345")])
def test_folder_and_number_of_agree(number: int, name: str) -> None:
    path = trialdir.folder(Path("/s"), number)
    assert path == Path("/s") / name
    assert trialdir.number_of(path) == number


@pytest.mark.parametrize("name", ["trial-", "trial-x1", ".interpreters", "repeat-2", "trial-00a"])
def test_number_of_other_paths_is_none(name: str) -> None:
    assert trialdir.number_of(Path("/s") / name) is None


def test_files_of_a_trial_with_repeats() -> None:
    got = trialdir.files(Path("/t"), processes=2)
    assert got == [(Path("/t/trial.log"), None), (Path("/t/result.json"), None), (Path("/t/config.json"), None),
                   (Path("/t/repeat-2/trial.log"), "repeat-2"), (Path("/t/repeat-2/result.json"), "repeat-2"),
                   (Path("/t/repeat-2/config.json"), "repeat-2")]
    assert trialdir.partial("/t/result.json") == "/t/result.json.tmp"


def test_root_is_under_mlruns_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert trialdir.root("bert", "0123456789abcdef") == tmp_path.resolve() / "mlruns" / ".trials" / "bert-01234567"
