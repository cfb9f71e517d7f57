"""What a study's stored spec (``space.fingerprint``) is weighed against: a study made before
constraints were stored keeps taking its spec's constraints; a parameter a trial was given from a
list is refused another list while the study has no result (Optuna would refuse it at the first
trial), read from Optuna's trials and from ``studyread``'s alike. Pure: no storage."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution, distribution_to_json

from orchestrator.store.fingerprint import comparable, conflict

WANTED = {"device": "cpu", "space": {"batch_size": [16, 64], "lr": {"low": 0.001, "high": 0.1, "step": None,
                                                                      "log": True}},
          "constraints": {"peak_memory_gib": {"max": 8}}}


def test_a_study_stored_before_constraints_were_compares_without_them() -> None:
    old = {k: v for k, v in WANTED.items() if k != "constraints"}
    assert comparable(old, WANTED) == old
    assert comparable({**old, "constraints": {}}, WANTED) == WANTED  # stored: a budget added later differs


@pytest.mark.parametrize("given, refused", [
    (CategoricalDistribution([16, 64]), None),
    (CategoricalDistribution([16, 32]), "batch_size from [16, 32]"),
    (IntDistribution(16, 64), "batch_size from an integer range"),
])
@pytest.mark.parametrize("stored_as", ["optuna", "studyread"])
def test_a_list_a_trial_was_given_cannot_change(given: object, refused: str | None, stored_as: str) -> None:
    dist = given if stored_as == "optuna" else distribution_to_json(given)  # type: ignore[arg-type]
    trial = SimpleNamespace(number=3, distributions={"batch_size": dist, "lr": FloatDistribution(0.001, 0.1, log=True)})
    found = conflict(WANTED, [SimpleNamespace(number=0, distributions={}), trial])
    assert (found is None) if refused is None else (found == f"trial 3 was given {refused}, and Optuna keeps a "
                                                    "parameter's values for the study's life"), found


def test_a_range_keeps_its_log_and_may_change_its_bounds() -> None:
    moved = SimpleNamespace(number=0, distributions={"lr": FloatDistribution(0.0001, 1.0, log=True)})
    assert conflict(WANTED, [moved]) is None
    linear = SimpleNamespace(number=1, distributions={"lr": json.loads(json.dumps(distribution_to_json(
        FloatDistribution(0.001, 0.1))))})
    assert conflict(WANTED, [linear]) == "trial 1 was given lr from a float range, and Optuna keeps a " \
        "parameter's values for the study's life"


def test_a_study_an_earlier_version_let_take_another_list_is_refused_though_it_stores_the_spec_now(
        tmp_path: Path) -> None:
    """A review: the version before took the edit (its fingerprint rewritten to the spec now) and
    every run then ended in Optuna's traceback; the stored spec equal to the spec now hid it."""
    from optuna.trial import TrialState

    from orchestrator.errors import StudyError
    from orchestrator.spec.load import load_spec
    from orchestrator.store.fingerprint import changed

    (tmp_path / "spec.yaml").write_text("name: t\nexperiment: experiments.mlp\nspace: {batch_size: [16, 64]}\n")
    spec = load_spec(tmp_path / "spec.yaml")
    failed = SimpleNamespace(number=0, state=TrialState.FAIL, distributions={"batch_size": CategoricalDistribution([8, 16])})
    with pytest.raises(StudyError, match=r"trial 0 was given batch_size from \[8, 16\], and Optuna keeps"):
        changed(spec, "sqlite:///x.db", WANTED, dict(WANTED), [failed])
    done = SimpleNamespace(number=1, state=TrialState.COMPLETE, distributions={})
    assert changed(spec, "sqlite:///x.db", WANTED, dict(WANTED), [failed, done]) is None  # results: as Optuna took them
