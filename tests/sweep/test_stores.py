"""``stores.elsewhere``: the line for a study resumed on other devices than its earlier trials'.
A real (in-memory) Optuna study; the machine records as ``record_machine`` writes them."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from orchestrator.sweep.stores import elsewhere


def machine(devices: list[str], names: dict[str, list[str]], slots: list[str] | None = None,
            torch: str = "2.13.0+cpu") -> dict[str, Any]:
    return {"devices": devices, "torch_version": torch, "device_names": names, "slots": slots or devices}


@pytest.fixture
def study() -> optuna.Study:
    s = optuna.create_study()
    s.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    return s


def on_h200(*slots: str) -> dict[str, Any]:
    """This run's machine (``machine.facts`` and its slots): H200s."""
    return machine(["cuda"], {"cuda": ["NVIDIA H200"]}, list(slots), "2.11.0+cu130")


def on_epyc(*slots: str) -> dict[str, Any]:
    """This run's machine: the AMD EPYC CPU."""
    return machine(["cpu"], {"cpu": ["AMD EPYC"]}, list(slots))


def test_a_study_resumed_alike_says_nothing(study: optuna.Study) -> None:
    before = machine(["cuda"], {"cuda": ["NVIDIA H200"]}, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"], "2.11.0+cu130")
    assert elsewhere(before, study, on_h200("cuda:2")) is None  # another GPU of the same kind
    assert elsewhere(None, study, on_h200("cuda:0")) is None  # nothing recorded
    assert elsewhere(before, optuna.create_study(), on_h200("cuda:0")) is None  # no trial before


def test_other_cpu_widths_gpus_or_torch_are_said(study: optuna.Study) -> None:
    pinned = machine(["cpu"], {"cpu": ["AMD EPYC"]}, ["cpu:0-0", "cpu:1-1"])
    line = elsewhere(pinned, study, on_epyc("cpu"))
    assert line is not None and ("the study's earlier trials ran on cpu:0-0, cpu:1-1 (AMD EPYC), torch 2.13.0+cpu, "
                                 "this run's trials run on cpu (AMD EPYC), torch 2.13.0+cpu") in line, line
    assert elsewhere(pinned, study, on_epyc("cpu:2-2", "cpu:3-3")) is None  # other cores, as wide
    assert elsewhere(pinned, study, on_epyc("cpu:0-1")) is not None  # two cores a trial
    older = machine(["cpu"], {"cpu": ["AMD EPYC"]}, torch="2.12.0+cpu")
    assert "torch 2.12.0+cpu" in (elsewhere(older, study, on_epyc("cpu")) or "")
    a100 = machine(["cuda"], {"cuda": ["NVIDIA A100"]}, ["cuda:0"])
    assert "NVIDIA A100" in (elsewhere(a100, study, on_epyc("cpu")) or "")
