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

@pytest.fixture
def project(seeded_project: Path) -> Path:
    """The project folder, its MLflow store already created (``conftest.seed_mlflow``): these
    tests are about what happens after a project's first run is set up."""
    return seeded_project


from orchestrator.errors import SpecError
from orchestrator.launch.slots import Gpu, available_cores, gpu_cores, resolve_slots

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
    (("cpu:0-99999999999",), "cpu", "-99999999999 are not available to this process"),  # said, not built (was a MemoryError)
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


def fake_sys(root: Path, siblings: dict[int, str], local: dict[str, str]) -> Path:
    """A /sys tree as Linux writes it: each CPU's hyperthread siblings, each PCI device's local CPUs."""
    for cpu, text in siblings.items():
        d = root / f"devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    for bus, text in local.items():
        d = root / f"bus/pci/devices/{bus}"
        d.mkdir(parents=True)
        (d / "local_cpulist").write_text(text + "\n")
    return root


def test_gpu_slots_get_disjoint_whole_cores_local_to_their_gpu(tmp_path: Path) -> None:
    """Contract test (no multi-socket GPU host here): 2 sockets of 4 cores with hyperthreads
    (CPU n and n+8 are siblings), GPUs 0 and 1 on socket 0, GPU 2 on socket 1."""
    siblings = {c: f"{c % 8},{c % 8 + 8}" for c in range(16)}
    local = {"0000:18:00.0": "0-3,8-11", "0000:3b:00.0": "0-3,8-11", "0000:86:00.0": "4-7,12-15"}
    root = fake_sys(tmp_path, siblings, local)
    gpus = [Gpu(0, "GPU-a", pci_bus_id="00000000:18:00.0"), Gpu(1, "GPU-b", pci_bus_id="00000000:3B:00.0"),
            Gpu(2, "GPU-c", pci_bus_id="00000000:86:00.0")]
    cores = gpu_cores(gpus, frozenset(range(16)), root)
    assert cores == [frozenset({0, 1, 8, 9}), frozenset({2, 3, 10, 11}), frozenset({4, 5, 6, 7, 12, 13, 14, 15})]
    # the process may use only some CPUs: those are split, siblings still together
    assert gpu_cores(gpus[:2], frozenset({0, 1, 2, 8, 9, 10}), root) == [frozenset({0, 8}), frozenset({1, 9})]
    # locality unknown (no bus id, or no such file): an even split of every core
    unknown = [Gpu(0, "GPU-a"), Gpu(1, "GPU-b", pci_bus_id="00000000:AF:00.0")]
    assert gpu_cores(unknown, frozenset(range(16)), root) == [
        frozenset({0, 1, 2, 3, 8, 9, 10, 11}), frozenset({4, 5, 6, 7, 12, 13, 14, 15})]
    # more GPUs than physical cores: nothing is pinned
    assert gpu_cores(gpus, frozenset({0, 8}), root) is None


def test_several_gpu_slots_pin_their_trials_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATE_TEST_GPUS", "0:GPU-aaaa,1:GPU-bbbb")
    one = resolve_slots(("cuda:0",), "cuda", fail)
    assert one[0].cores is None and "OMP_NUM_THREADS" not in one[0].env
    if gpu_cores([Gpu(0, "a"), Gpu(1, "b")], available_cores()) is None:
        pytest.skip("needs two physical cores")
    two = resolve_slots(("auto",), "cuda", fail)
    assert two[0].cores and two[1].cores and not two[0].cores & two[1].cores
    assert [s.env["OMP_NUM_THREADS"] for s in two] == [str(len(s.cores)) for s in two]


def test_the_spec_checks_the_devices_syntax(tmp_path: Path) -> None:
    from orchestrator.spec.load import load_spec

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
def test_two_gpu_slots_run_at_once_one_trial_per_slot(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec(project, SPEC)
    env = {"ORCHESTRATE_TEST_GPUS": "0:GPU-aaaa,1:GPU-bbbb", "ORCHESTRATE_TEST_EXIT_DELAY_S": "0.5"}
    monkeypatch.setenv("ORCHESTRATE_TEST_GPUS", env["ORCHESTRATE_TEST_GPUS"])
    proc = orchestrate([str(spec), "--devices", "auto", "--no-check"], project, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "2 cpu slots (cuda:0, cuda:1" in proc.stdout
    shares = gpu_cores([Gpu(0, "GPU-aaaa"), Gpu(1, "GPU-bbbb")], available_cores())  # None: too few cores
    pinned = shares is not None
    assert ("each GPU's trials pinned to CPU cores of their own (cuda:0: " in proc.stdout) == pinned
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
        if pinned:  # and only its own share of the cores
            mine = shares[int(t.user_attrs["slot"][-1])]
            assert placement["cpu_cores"] == len(mine) == int(placement["OMP_NUM_THREADS"])
            slot = resolve_slots(("auto",), "cpu", fail)[int(t.user_attrs["slot"][-1])]
            assert t.user_attrs["cpu_cores"] == slot.record()["cpu_cores"] and slot.cores == mine
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
    plan = orchestrate([str(spec), "--devices", devices, "--dry-run"], project)  # the dry run names the slots
    assert f"  device       cpu; 2 slots, one trial at a time on each: {devices.replace(',', ', ')}\n" in plan.stdout
    proc = orchestrate([str(spec), "--devices", devices, "--no-check", "--n-trials", "5"], project)
    assert proc.returncode == 0, proc.stderr
    assert "each trial pinned to its own cores" in proc.stdout
    resume = next(line for line in proc.stdout.splitlines() if line.startswith("Resume:"))
    assert resume.endswith(f" --devices {devices} --n-trials 5"), resume  # pasted, the same sweep on the same slots
    report = orchestrate(["report", str(spec), "--format", "text"], project)
    table = report.stdout.split("\n\n")[1].splitlines()  # the trials' table: a slot column, each trial's slot
    assert "  slot " in table[0] and {row.split()[7] for row in table[1:]} == set(devices.split(",")), report.stdout
    records = check_records(project, "slots", n_results=5)
    for t in records["results"]:
        placement = json.loads((Path(t.user_attrs["trial_dir"]) / "result.json").read_text())["placement"]
        assert placement["cpu_cores"] == 1 and placement["OMP_NUM_THREADS"] == "1"
        assert t.user_attrs["cpu_cores"] == t.user_attrs["slot"].split(":")[1].split("-")[0]
    # the rest on the whole CPU (--devices left out): ranked with one-core results, and said so
    rest = orchestrate([str(spec), "--no-check"], project)
    assert rest.returncode == 0, rest.stderr
    assert (f"  the study's earlier trials ran on {devices.replace(',', ', ')} (" in rest.stdout
            and "this run's trials run on cpu (" in rest.stdout and "ranked together" in rest.stdout), rest.stdout
    check_records(project, "slots", n_results=6)


def test_mps_with_two_slots_is_refused_in_one_line(project: Path) -> None:
    spec = write_spec(project, "name: m\nexperiment: experiments.mlp\ndevice: mps\ndevices: [mps, cpu:0-0]\n")
    proc = orchestrate([str(spec)], project)
    assert proc.returncode == 2
    # on this machine torch has no MPS: the device check speaks first, in one line either way
    assert len(proc.stderr.strip().splitlines()) == 1 and str(spec) in proc.stderr
