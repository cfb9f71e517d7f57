"""Where ``compile: true`` keeps Inductor's caches, and the compile time a trial reports
(``orchestrator/harness/compiled.py``). The compilation itself: ``test_harness.py``'s compile tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator import trialdir
from orchestrator.harness import compiled


def test_a_sweep_gives_its_trials_a_folder_of_the_study_unless_the_user_chose_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.CACHE_ENV, raising=False)
    assert compiled.cache_folder("/p/mlruns/.trials/s-1234") == f"/p/mlruns/.trials/s-1234/{trialdir.COMPILE_CACHE}"
    monkeypatch.setenv(compiled.CACHE_ENV, "/mine")
    assert compiled.cache_folder("/p/mlruns/.trials/s-1234") is None


def test_the_trial_uses_the_folder_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.CACHE_ENV, "/tmp/default")
    compiled.use_cache(None)
    assert os.environ[compiled.CACHE_ENV] == "/tmp/default"
    compiled.use_cache(str(tmp_path / "c"))
    assert os.environ[compiled.CACHE_ENV] == str(tmp_path / "c") and (tmp_path / "c").is_dir()


def test_a_process_that_compiled_nothing_reports_no_compile_time() -> None:
    pytest.importorskip("torch")
    from torch._dynamo.utils import compilation_time_metrics

    if any(k in compilation_time_metrics for k in compiled.COMPILE_KEYS):
        pytest.skip("this test process compiled something before")
    assert compiled.seconds() is None
