"""Device slots: which slots a `devices` list gives (a table), and a real sweep on several slots
keeping one trial per slot at any moment, each with its own CUDA_VISIBLE_DEVICES.

No GPU here: ``ORCHESTRATE_TEST_GPUS`` stands in for nvidia-smi's list and lets CPU trials run on
such slots, so the scheduling is real (real processes, real Optuna and MLflow) and only the GPU
is pretend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import check_records, orchestrate, write_spec
from orchestrator.errors import SpecError
from orchestrator.slots import available_cores, resolve_slots

FAKE = "0:GPU-aaaa,1:GPU-bbbb,2:GPU-cccc"


def fail(rule: str) -> SpecError:
    return SpecError(rule, file="spec.yaml", field="devices")


@pytest.mark.parametrize("items, device, names, visible", [
    (None, "cuda", ["cuda"], [None]),
    (("auto",), "cuda", ["cuda:0", "cuda:1", "cuda:2"], ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]),
    (("cuda:0", "cuda:2"), "cuda", ["cuda:0", "cuda:2"], ["GPU-aaaa", "GPU-cccc"]),
    (("cuda",), "cuda", ["cuda:0", "cuda:1", "cuda:2"], ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]),
    (("auto",), "mps", ["mps"], [None]),
    (("mps",), "mps", ["mps"], [None]),
    (("cpu",), "cpu", ["cpu"], [None]),
])
def test_slots_from_a_devices_list(monkeypatch: pytest.MonkeyPatch, items, device, names, visible) -> None:
    monkeypatch.setenv("ORCHESTRATE_TEST_GPUS", FAKE)
    slots = resolve_slots(items, device, fail)
    assert [s.name for s in slots] == names
    assert [s.env.get("CUDA_VISIBLE_DEVICES") for s in slots] == visible
    for s in slots:
        if s.gpu is not None:
            assert s.record()["gpu_uuid"] == s.env["CUDA_VISIBLE_DEVICES"]
            assert s.record()["gpu_index"] == int(s.name.split(":")[1])


@pytest.mark.parametrize("items, device, message", [
    (("mps", "mps"), "mps", None),  # the spec refuses a repeated slot; resolve sees it as two
    (("mps", "cpu:0-0"), "mps", "MPS has one device"),
    (("cuda:7",), "cuda", "there is no GPU cuda:7 here; visible: cuda:0"),
    (("cuda:0", "cpu:0-0"), "cuda", "mixes cuda and cpu"),
    (("cuda:0",), "mps", "devices lists GPUs but the trials run on mps"),
    (("cpu:0-0", "cpu:0-0"), "cpu", "shares cores"),
    (("cpu:0-999",), "cpu", "are not available to this process"),
    (("cpu", "cpu:0-0"), "cpu", "'cpu' takes every core"),
    (("cuda:0",), "swept", "space.device sweeps it"),
])
def test_slots_that_cannot_be_are_refused_with_the_rule(monkeypatch: pytest.MonkeyPatch, items, device,
                                                        message) -> None:
    monkeypatch.setenv("ORCHESTRATE_TEST_GPUS", FAKE)
    with pytest.raises(SpecError) as err:
        resolve_slots(items, device, fail)
    assert (message or "MPS has one device") in str(err.value)


def test_no_gpus_listed_means_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATE_TEST_GPUS", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    with pytest.raises(SpecError, match="nvidia-smi lists none"):
        resolve_slots(("cuda:0",), "cuda", fail)


def test_cpu_core_slots_are_disjoint_and_pin_their_threads() -> None:
    cores = sorted(available_cores())
    if len(cores) < 2:
        pytest.skip("needs two cores")
    slots = resolve_slots((f"cpu:{cores[0]}-{cores[0]}", f"cpu:{cores[1]}-{cores[1]}"), "cpu", fail)
    assert [s.cores for s in slots] == [frozenset({cores[0]}), frozenset({cores[1]})]
    assert all(s.env["OMP_NUM_THREADS"] == "1" for s in slots)


def test_the_spec_checks_the_devices_syntax(tmp_path: Path) -> None:
    from orchestrator.spec import load_spec

    for bad, rule in (("gpu0", "devices must be auto or a list"), ("cpu:3-1", "A <= B"),
                      ("cuda:0,cuda:0", "listed twice")):
        spec = write_spec(tmp_path, f"name: x\nexperiment: experiments.mlp\ndevices: {bad}\n")
        with pytest.raises(SpecError, match=rule) as err:
            load_spec(spec)
        assert str(err.value).startswith(f"{spec}:3: devices")
    flag = load_spec(write_spec(tmp_path, "name: x\nexperiment: experiments.mlp\n"),
                     {"--devices": (("devices",), "cuda:0,cuda:1")})
    assert flag.devices == ("cuda:0", "cuda:1")


SPEC = """
    name: slots
    experiment: experiments.mlp
    device: cpu
    fixed: {in_features: 8, hidden_size: 16, num_layers: 1}
    space:
      batch_size: [4, 8, 16, 32, 64, 128]
    search: {sampler: grid}
    trial: {warmup_steps: 1, measure_steps: 2, min_measure_s: 0.2, timeout_s: 120}
    """


def _intervals(results: list) -> dict[str, list[tuple[float, float, float | None, float]]]:
    """Per slot: (first device touch, result written, slot free since, started) of each trial."""
    by_slot: dict[str, list] = {}
    for t in results:
        result = json.loads((Path(t.user_attrs["trial_dir"]) / "result.json").read_text())
        tl = result["timeline"]
        by_slot.setdefault(t.user_attrs["slot"], []).append(
            (tl["device"], tl["result_written"], t.user_attrs.get("slot_free_at"), t.user_attrs["started_at"]))
    return {k: sorted(v) for k, v in by_slot.items()}


@pytest.mark.slow
def test_two_gpu_slots_run_at_once_one_trial_per_slot(project: Path) -> None:
    spec = write_spec(project, SPEC)
    env = {"ORCHESTRATE_TEST_GPUS": "0:GPU-aaaa,1:GPU-bbbb", "ORCHESTRATE_TEST_EXIT_DELAY_S": "0.5"}
    proc = orchestrate([str(spec), "--devices", "auto", "--no-check"], project, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "2 cpu slots (cuda:0, cuda:1" in proc.stdout
    records = check_records(project, "slots", n_results=6)
    results = records["results"]
    slots = _intervals(results)
    assert set(slots) == {"cuda:0", "cuda:1"}, "both slots were used"
    for name, spans in slots.items():
        for (dev_a, done_a, _, _), (dev_b, _, free_b, start_b) in zip(spans, spans[1:]):
            # one trial at a time on a slot: the next touches the device only after the previous
            # process wrote its result and exited (the exit took 0.5 s on purpose)
            assert free_b is not None and free_b >= done_a + 0.45, (name, done_a, free_b)
            assert start_b >= free_b and dev_b >= start_b
    both = [span for spans in slots.values() for span in spans]
    overlapping = any(a[0] < b[1] and b[0] < a[1] for a in slots["cuda:0"] for b in slots["cuda:1"])
    assert overlapping, f"the two slots never ran at the same time: {both}"
    for t in results:  # each trial saw its own GPU, recorded with the host that ran it
        placement = json.loads((Path(t.user_attrs["trial_dir"]) / "result.json").read_text())["placement"]
        assert placement["CUDA_VISIBLE_DEVICES"] == t.user_attrs["gpu_uuid"]
        assert t.user_attrs["gpu_uuid"] == {"cuda:0": "GPU-aaaa", "cuda:1": "GPU-bbbb"}[t.user_attrs["slot"]]
        assert t.user_attrs["host"]
        run = records["runs"][t.number][0]
        assert run.data.tags["gpu_uuid"] == t.user_attrs["gpu_uuid"] and run.data.tags["slot"] == t.user_attrs["slot"]


@pytest.mark.slow
def test_cpu_slots_pin_each_trial_to_its_cores(project: Path) -> None:
    cores = sorted(available_cores())
    if len(cores) < 2:
        pytest.skip("needs two cores")
    spec = write_spec(project, SPEC)
    devices = f"cpu:{cores[0]}-{cores[0]},cpu:{cores[1]}-{cores[1]}"
    proc = orchestrate([str(spec), "--devices", devices, "--no-check"], project)
    assert proc.returncode == 0, proc.stderr
    assert "each trial pinned to its own cores" in proc.stdout
    records = check_records(project, "slots", n_results=6)
    for t in records["results"]:
        placement = json.loads((Path(t.user_attrs["trial_dir"]) / "result.json").read_text())["placement"]
        assert placement["cpu_cores"] == 1 and placement["OMP_NUM_THREADS"] == "1"
        assert t.user_attrs["cpu_cores"] == t.user_attrs["slot"].split(":")[1].split("-")[0]


def test_mps_with_two_slots_is_refused_in_one_line(project: Path) -> None:
    spec = write_spec(project, "name: m\nexperiment: experiments.mlp\ndevice: mps\ndevices: [mps, cpu:0-0]\n")
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 2
    # on this machine torch has no MPS: the device check speaks first, in one line either way
    assert len(proc.stderr.strip().splitlines()) == 1 and str(spec) in proc.stderr
