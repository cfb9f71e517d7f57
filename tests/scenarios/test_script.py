"""A user's training script swept unchanged, as a user runs it: the four frameworks people train
with (a plain loop, Hugging Face's Trainer, Lightning, Accelerate) measured on the CPU with tiny
models; a batch over the CPU memory limit recorded as ``oom``; a crashing, hanging, early-exiting
and never-stepping script each with its line; no process left behind; the best as a command line."""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, child_runs, command, left_behind, load_study, orchestrate, write_spec
from procs import processes

pytestmark = pytest.mark.slow
SCRIPTS = ROOT / "examples" / "scripts"


def processes_under(folder: Path) -> list[str]:
    """Live processes that mention ``folder`` on their command line or work in it (``left_behind``,
    which waits up to 10 s for them to end): a trial's, its children's, and what the script started
    itself (``sleep 600`` names no folder: only its working folder says whose it is)."""
    return sorted(set(_named_under(folder)) | set(left_behind(folder)))


def _named_under(folder: Path) -> list[str]:
    return [f"{p.pid} {p.cmdline}" for p in processes() if str(folder) in p.cmdline]


def copy_example(tmp_path: Path, *names: str) -> None:
    for name in names:
        shutil.copy(SCRIPTS / name, tmp_path / name)


def test_a_plain_script_is_measured_its_oom_recorded_and_its_best_is_a_command(tmp_path: Path) -> None:
    copy_example(tmp_path, "train.py")
    write_spec(tmp_path, """
        name: plain
        script: train.py
        args: ["--batch-size", "{batch_size}", "--precision", "{precision}", "--width", "4", "--device", "{device}"]
        device: cpu
        fixed: {cpu_memory_limit_gib: 1.0}
        space:
          batch_size: [16, 131072]
          precision: [fp32, bf16]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 3, min_measure_s: 0.2}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_params = {(t.params["batch_size"], t.params["precision"]): t for t in load_study(tmp_path, "plain").trials}
    assert by_params[(16, "fp32")].user_attrs["status"] == "ok" and by_params[(16, "bf16")].user_attrs["status"] == "ok"
    assert by_params[(131072, "fp32")].user_attrs["status"] == "oom"  # RLIMIT_DATA: a real CPU out-of-memory
    assert "DefaultCPUAllocator: can't allocate memory" in by_params[(131072, "fp32")].user_attrs["detail"]
    assert "Command: python train.py --batch-size 16 --precision " in proc.stdout
    runs = child_runs(tmp_path, "plain")
    assert {r.data.params["precision"] for r in runs} == {"fp32", "bf16"}  # the script's own names
    best = command(["best", "spec.yaml"], tmp_path)
    assert best.returncode == 0 and best.stdout.startswith("python train.py --batch-size 16 --precision ")
    assert best.stdout.rstrip().endswith("--width 4 --device cpu")
    dry = orchestrate(["spec.yaml", "--dry-run"], tmp_path)
    assert "python train.py --batch-size 131072 --precision bf16 --width 4 --device cpu" in dry.stdout
    # the script's code and the window edited, then run again: said once (a tour's new trials ran 5x slower,
    # ranked with the old), and kept with the study, so the next run has nothing to say
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text() + "\n# tuned\n")
    (tmp_path / "spec.yaml").write_text((tmp_path / "spec.yaml").read_text().replace("min_measure_s: 0.2", "min_measure_s: 0.1"))
    again = orchestrate(["spec.yaml", "--retry", "oom"], tmp_path)
    assert again.returncode == 0 and again.stdout.count("since this study's last run") == 1, again.stdout
    assert "\n  since this study's last run: trial.min_measure_s 0.2 -> 0.1; train.py changed (sha256 " in again.stdout
    import hashlib

    assert load_study(tmp_path, "plain").user_attrs["orchestrate.measured_with"]["script_sha256"] == \
        hashlib.sha256((tmp_path / "train.py").read_bytes()).hexdigest()
    assert not processes_under(tmp_path)
    # the spec pointed at another script since: best reads the study with the one it ran, and names it
    shutil.copy(tmp_path / "train.py", tmp_path / "train2.py")
    (tmp_path / "spec.yaml").write_text((tmp_path / "spec.yaml").read_text().replace("script: train.py", "script: train2.py"))
    edited = command(["best", "spec.yaml"], tmp_path)
    assert edited.returncode == 0 and edited.stdout.startswith("python train.py --batch-size 16 "), edited.stdout
    assert "the spec was edited since study 'plain' ran (script: stored \"train.py\", spec \"train2.py\")" in edited.stderr


FAULTY = """
    import argparse, os, signal, subprocess, sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    p = argparse.ArgumentParser()
    p.add_argument("--mode")
    mode = p.parse_args().mode
    print(f"starting {mode}", flush=True)

    sleeper = subprocess.Popen(["sleep", "600"])  # a child that the end of the window, or a timeout, kills

    def died(*_):  # as a DataLoader's SIGCHLD handler raises when one of its workers is killed
        if sleeper.poll() is not None:
            raise RuntimeError("a child of the script died")

    signal.signal(signal.SIGCHLD, died)
    if mode == "nostep":
        sys.exit(0)
    if mode == "hang":
        time.sleep(600)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.zeros(64, dtype=torch.long)), batch_size=8,
                        num_workers=2 if mode == "workers" else 0)
    if mode == "workers":  # a child of its own besides the DataLoader's workers
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "child-of-a-trial"])
    for epoch in range(1 if mode == "early" else 1000):
        for step, (x, y) in enumerate(loader):
            if mode == "crash" and step == 3:
                raise ValueError("the data went wrong at step 3")
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    print("finished", flush=True)
"""


def test_each_way_a_script_fails_gets_its_line_and_nothing_outlives_the_sweep(tmp_path: Path) -> None:
    (tmp_path / "faulty.py").write_text(textwrap.dedent(FAULTY))
    write_spec(tmp_path, """
        name: faulty
        script: faulty.py
        args: ["--mode", "{mode}"]
        device: cpu
        space:
          mode: [workers, ok, crash, early, nostep, hang]  # the smoke step takes the first
        search: {sampler: grid, max_failures: 10}
        trial: {warmup_steps: 1, measure_steps: 12, min_measure_s: 0.2, timeout_s: 4}
    """)
    temp = Path(tempfile.mkdtemp(prefix="t"))  # short: a socket's path has room for 108 bytes
    try:
        proc = orchestrate(["spec.yaml"], tmp_path, env={"TMPDIR": str(temp)})
        left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # ok and workers fit: the failures are results
    # the DataLoader workers' sockets' folders (multiprocessing's pymp-*) went with their trials and the
    # smoke step: torch's own compile cache alone stays
    assert left == []
    lines = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith("#")}
    trials = {t.params["mode"]: t.user_attrs for t in load_study(tmp_path, "faulty").trials}
    assert trials["ok"]["status"] == "ok" and trials["workers"]["status"] == "ok", (  # what went wrong, if it did
        trials["ok"].get("detail"), trials["workers"].get("detail"))
    assert trials["crash"]["status"] == "error"
    assert trials["crash"]["detail"].startswith("ValueError: the data went wrong at step 3 at faulty.py:31; "
                                                "it printed: starting crash")
    assert trials["early"]["detail"].startswith("the script ended after 8 optimizer step(s), before its window "
                                                "closed (1 warm-up + 12 measured steps and 0.2 s)")
    assert trials["early"]["detail"].endswith("it printed: starting early | finished")
    assert trials["nostep"]["detail"].startswith("the script exited (exit code 0) without stepping an optimizer")
    assert trials["hang"]["status"] == "timeout"
    assert trials["hang"]["detail"] == ("no result within timeout_s=4; process group killed; its last output: "
                                        "starting hang")
    assert "mode=crash" in lines["mode=crash"] and "ValueError: the data went wrong" in lines["mode=crash"]
    assert not processes_under(tmp_path)  # DataLoader workers, the script's child, the hung script: all gone
    # its child killed at the window's end (or the timeout's) raised in the script's SIGCHLD handler, as a
    # DataLoader's does: an ok result was overwritten with that error after it was read, a timeout recorded it
    logs = [p.read_text() for p in tmp_path.glob("mlruns/.trials/faulty-*/trial-*/trial.log")]
    assert len(logs) == 6 and not [log for log in logs if "a child of the script died" in log]


def test_a_script_broken_before_its_first_step_stops_the_sweep_in_one_line(tmp_path: Path) -> None:
    copy_example(tmp_path, "train.py")
    write_spec(tmp_path, """
        name: badflag
        script: train.py
        args: ["--bs", "{batch_size}"]
        device: cpu
        space: {batch_size: [8, 16]}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.startswith("spec.yaml:2: script: train.py failed its smoke step (`python train.py --bs 8`, run "
                                  "with the smallest batch until its first optimizer step, before any trial): the "
                                  "script exited (exit code "
                                  "2) before its first optimizer step; it printed: ")
    assert "error: unrecognized arguments: --bs 8" in proc.stderr and proc.stderr.count("\n") == 1  # the smallest swept
    assert not (tmp_path / "mlruns" / "optuna.db").exists()  # nothing was created
    # from the folder above, the command names the script as it is found from there (a tour pasted
    # `python train.py --bs 8` from there, which is not the script it ran)
    shutil.copytree(tmp_path, tmp_path / "sub", ignore=shutil.ignore_patterns("sub", "mlruns"))
    above = orchestrate(["sub/spec.yaml"], tmp_path)
    assert above.returncode == 2 and "(`python sub/train.py --bs 8`, run" in above.stderr, above.stderr
    # a script that trains in processes it starts (a tour's `accelerate launch ...`) exits 0 stepping none here:
    # it was said to have exited "before its first optimizer step", with two epochs of its output after it
    (tmp_path / "train.py").write_text("import sys\nprint('epoch 0 loss 0.25')\nsys.exit(0)\n")
    elsewhere = orchestrate(["spec.yaml"], tmp_path)
    assert elsewhere.returncode == 2 and elsewhere.stderr.count("\n") == 1, elsewhere.stderr
    assert ("before any trial): the script exited (exit code 0) without stepping an optimizer (the harness counts "
            "torch.optim.Optimizer.step calls in the script's own process: one that never calls one, or trains in "
            "processes it starts (torch.multiprocessing.spawn, a launcher), cannot be measured); it printed: "
            "epoch 0 loss 0.25 (fix the script") in elsewhere.stderr, elsewhere.stderr
    # one that trains in processes it starts through torch.multiprocessing (mp.spawn, Lightning's ddp_spawn)
    # waited the smoke step's whole timeout_s (15 min by default; a script tour): refused at the call now
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import time, torch.multiprocessing as mp
        def train(rank):
            time.sleep(600)  # never reached: the harness refuses the start
        if __name__ == "__main__":
            mp.spawn(train, nprocs=1)
    """))
    spawned = orchestrate(["spec.yaml"], tmp_path)
    assert spawned.returncode == 2 and spawned.stderr.count("\n") == 1, spawned.stderr
    assert ("before any trial): the script trains in processes it starts (torch.multiprocessing's start_processes: "
            "mp.spawn, Lightning's strategy='ddp_spawn', Accelerate's notebook_launcher), whose steps the harness "
            "cannot see: train in the script's own process (Lightning's strategy='ddp' keeps rank 0 there) (fix the "
            "script") in spawned.stderr, spawned.stderr
    assert left_behind(tmp_path) == []


def test_a_script_that_never_steps_is_said_so_on_its_own_field(tmp_path: Path) -> None:
    """The tour's script that calls backward() and never optimizer.step(): after 300 s the line
    named the spec's ``experiment`` (it has none) and not why; the smoke step waits at most
    ``trial.timeout_s`` (2 s here), then says so on ``script``, with the last line it printed."""
    (tmp_path / "nostep.py").write_text("import time\nwhile True:\n    print('epoch', flush=True)\n    time.sleep(0.2)\n")
    write_spec(tmp_path, """
        name: nostep
        script: nostep.py
        args: ["{batch_size}"]
        device: cpu
        space: {batch_size: [8, 16]}
        trial: {timeout_s: 2}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 2 and not proc.stdout, proc.stderr
    assert proc.stderr == ("spec.yaml:2: script: the smoke step (the script run at the smallest batch until its first "
                           "optimizer step, before any trial; skip it with --no-check) took more than 2 s without an "
                           "optimizer step in the script's own process (does it call optimizer.step(), or train in "
                           "processes it starts, as torch.multiprocessing.spawn does, which cannot be measured?); "
                           "the last line it printed: "
                           "'epoch'\n"), proc.stderr
    assert not (tmp_path / "mlruns" / "optuna.db").exists() and left_behind(tmp_path) == []


def test_a_value_whose_only_trial_ended_early_is_measured_elsewhere_before_the_stop(tmp_path: Path) -> None:
    """A script tour: a script that ends before its window closes at most configurations ('error').
    The auto search counted a configuration that failed in this run as a look in flight at its
    values, so ``amp: "off"``, whose first trial had failed, was never tried at another batch: the
    sweep ended after 7 of 9 trials, exit 0, and said nothing of why. Now it runs the other two and
    says that it ended on failures."""
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import argparse, sys
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        p = argparse.ArgumentParser()
        p.add_argument("--bs", type=int); p.add_argument("--amp")
        a = p.parse_args()
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(3 * a.bs, 8)), batch_size=a.bs)
        for _ in range(10**6 if (a.bs, a.amp) == (64, "fp16") else 1):  # the others end before the window
            for (x,) in loader:
                model(x).sum().backward()
                opt.step(); opt.zero_grad()
        sys.exit(0)
    """))
    write_spec(tmp_path, """
        name: early
        script: train.py
        args: ["--bs", "{batch_size}", "--amp", "{amp}"]
        device: cpu
        space: {batch_size: [64, 256, 1024], amp: ["off", bf16, fp16]}
        search: {memory_order: {amp: {"off": 2, bf16: 1, fp16: 1}}}
        trial: {warmup_steps: 3, measure_steps: 10, min_measure_s: 0.3}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load_study(tmp_path, "early").get_trials()
    statuses = sorted(t.user_attrs["status"] for t in trials)
    assert statuses == ["error"] * 8 + ["ok"], [(t.params, t.user_attrs["status"]) for t in trials]
    assert "Stopped: every configuration has a result or failed (8 failed)." in proc.stdout
    assert "Go on anyway" not in proc.stdout  # --stop budget would run nothing more
    # each trial's line cuts its note short; the advice is in the first one's whole
    first = next(ln for ln in proc.stdout.splitlines() if ln.startswith("First error: trial #"))
    assert ": the script ended (exit code 0) after 3 optimizer step(s), before its window closed (3 warm-up + 10 " \
           "measured steps and 0.3 s): let it train for longer (more epochs or steps); its log: " in first, first
    assert first.endswith("/trial.log") and Path(first.split("; its log: ")[1]).is_file(), first


@pytest.mark.parametrize("example, name, accumulate", [
    ("hf_trainer.yaml", "hf_trainer_script", "accum"),
    ("lightning.yaml", "lightning_script", "accumulate"),
    ("accelerate.yaml", "accelerate_script", "accum"),
])
def test_a_framework_s_training_script_is_swept_unchanged(tmp_path: Path, example: str, name: str,
                                                         accumulate: str) -> None:
    """The shipped example, its space cut to one batch size with and without accumulation: every
    step's samples counted through the framework's own DataLoader wrapping, once each."""
    import yaml

    spec = yaml.safe_load((SCRIPTS / example).read_text())
    copy_example(tmp_path, spec["script"])
    spec["space"] = {**{k: [v[0]] for k, v in spec["space"].items()}, accumulate: [1, 2]}
    spec["fixed"] = {k: v for k, v in (spec.get("fixed") or {}).items() if k != accumulate}
    spec["trial"] = {"warmup_steps": 1, "measure_steps": 3, "min_measure_s": 0.1}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_accum = {}
    for config in tmp_path.glob(f"mlruns/.trials/{name}-*/trial-*/config.json"):
        params = json.loads(config.read_text())["params"]
        by_accum[params[accumulate]] = json.loads((config.parent / "result.json").read_text())
    batch = spec["space"]["batch_size"][0]
    assert {k: r["status"] for k, r in by_accum.items()} == {1: "ok", 2: "ok"}
    assert by_accum[1]["info"]["samples_per_step"] == batch and by_accum[2]["info"]["samples_per_step"] == 2 * batch
    assert not processes_under(tmp_path)


def test_a_script_that_ignores_its_batch_flag_is_said_so(tmp_path: Path) -> None:
    """The tour's script with ``batch_size=16`` hard-coded: two trials ranked "batch 32 best" with
    nothing said; the DataLoader's count per optimizer step shows it, once both have run."""
    (tmp_path / "fixed.py").write_text(textwrap.dedent("""
        import argparse, torch
        from torch.utils.data import DataLoader, TensorDataset
        p = argparse.ArgumentParser(); p.add_argument("--bs", type=int); a = p.parse_args()
        data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
        model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in DataLoader(data, batch_size=16):  # a.bs is never used
            opt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()
    """))
    write_spec(tmp_path, """
        name: fixed
        script: fixed.py
        args: ["--bs", "{batch_size}"]
        device: cpu
        space: {batch_size: [32, 128]}
        search: {sampler: grid}
        trial: {warmup_steps: 2, measure_steps: 5, min_measure_s: 0.05}
    """)
    proc = orchestrate(["spec.yaml", "--no-check", "--export", "best.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "does not reach the script" in ln]
    line = ("trials #0 (batch_size=32) and #1 (batch_size=128) both drew 16 samples per optimizer step from the "
            "script's DataLoader: the swept batch size does not reach the script (is its flag in args, and does "
            "the script use it?), so their throughputs measure the same batch")
    assert said == [f"orchestrate: {line}"], proc.stderr
    # a script tour: said once, live; the winner it puts in doubt was then shown without it. The
    # summary, report and best show it beside the best (from the trials' results, so for any study)
    assert (proc.stdout + proc.stderr).count(f"Caveat: {line}") == 1, proc.stdout  # --export's line: not again
    assert f"# Caveat: {line}" in (tmp_path / "best.yaml").read_text()
    for words in (["report", "spec.yaml"], ["best", "spec.yaml"]):
        again = command(words, tmp_path)
        assert again.returncode == 0 and f"Caveat: {line}" in again.stdout + again.stderr, again.stdout + again.stderr


DETECTION = """
    import argparse
    import torch
    from torch.utils.data import DataLoader, Dataset
    from tqdm import box_mean  # the script's own tqdm.py, beside it: an installed tqdm shadowed it in the trials

    class Boxes(Dataset):
        def __len__(self):
            return 256
        def __getitem__(self, i):
            n = 1 + i % 3
            return torch.rand(3, 16, 16), {"boxes": torch.rand(n, 4), "labels": torch.ones(n, dtype=torch.long)}

    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, choices=[4, 16])  # no batch of 2: the smoke step runs the smallest swept
    size = p.parse_args().batch_size
    loader = DataLoader(Boxes(), batch_size=size, collate_fn=lambda items: tuple(zip(*items)))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(100):
        for images, targets in loader:
            loss = torch.nn.functional.mse_loss(model(torch.stack(images)), box_mean(targets))
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_a_detection_script_is_counted_by_its_images(tmp_path: Path) -> None:
    """From a tour of users' own scripts: torchvision's detection collate (``tuple(zip(*batch))``)
    was counted 3 samples a step (an image's channels) at every batch size, and the sweep said the
    batch size did not reach the script; ``choices=[4, 16]`` failed the smoke step, run at batch 2;
    a ``tqdm.py`` beside the script lost to the installed tqdm the fork server had preloaded."""
    (tmp_path / "det.py").write_text(textwrap.dedent(DETECTION))
    (tmp_path / "tqdm.py").write_text("import torch\n\ndef box_mean(targets):\n"
                                      "    return torch.stack([t['boxes'].mean(0) for t in targets])\n")
    write_spec(tmp_path, """
        name: det
        script: det.py
        args: ["--batch-size", "{batch_size}"]
        device: cpu
        space:
          batch_size: [4, 16]
        search: {sampler: grid}
        trial: {warmup_steps: 1, measure_steps: 3, min_measure_s: 0.1}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "does not reach the script" not in proc.stderr, proc.stderr
    counted = {}
    for config in tmp_path.glob("mlruns/.trials/det-*/trial-*/config.json"):
        result = json.loads((config.parent / "result.json").read_text())
        counted[json.loads(config.read_text())["params"]["batch_size"]] = (result["status"], result["info"]["samples_per_step"])
    assert counted == {4: ("ok", 4), 16: ("ok", 16)}, counted
    assert not processes_under(tmp_path)


VALIDATING = """
    import sys
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 2)
        def training_step(self, batch, i):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        def validation_step(self, batch, i):
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def data(n):
        return TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))

    trainer = L.Trainer(accelerator="cpu", max_steps=100000, val_check_interval=2, limit_val_batches=3,
                        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(), DataLoader(data(4096), batch_size=int(sys.argv[1])), DataLoader(data(4096), batch_size=100))
"""


def test_a_lightning_validation_inside_the_window_is_not_counted_as_training(tmp_path: Path) -> None:
    """A Lightning ``Trainer`` validating every 2 steps, 3 batches of 100: those batches were counted
    as the training's (16 a step), 166 samples a step and a throughput several times the truth, with
    nothing said. Only the training loader's batches count now, and the sweep says why."""
    (tmp_path / "fit.py").write_text(textwrap.dedent(VALIDATING))
    write_spec(tmp_path, """
        name: validating
        script: fit.py
        args: ["{batch_size}"]
        device: cpu
        space: {batch_size: [16]}
        search: {sampler: grid}
        trial: {warmup_steps: 2, measure_steps: 6, min_measure_s: 0.05}
    """)
    proc = orchestrate(["spec.yaml", "--no-check"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = [json.loads(p.read_text()) for p in tmp_path.glob("mlruns/.trials/validating-*/trial-*/result.json")]
    assert result["status"] == "ok" and result["info"]["samples_per_step"] == 16, result["info"]
    assert result["info"]["other_batches"] >= 6, result["info"]  # 3 validations of 3 batches in 6 steps, give or take one
    said = [ln for ln in proc.stderr.splitlines() if "another DataLoader" in ln]
    assert said == [f"orchestrate: trial #0 drew {result['info']['other_batches']} batches from another DataLoader "
                    "inside its timed window (an evaluation loop?): their samples are not counted, their time is; "
                    "set the script's evaluation interval beyond the window to measure training alone"], proc.stderr
    assert not processes_under(tmp_path)


def example_before(tmp_path: Path, name: str, first: str) -> None:
    """The example ``train.py`` with ``first`` run before it, and a spec of one configuration, ``name``."""
    copy_example(tmp_path, "train.py")
    script = tmp_path / "train.py"
    script.write_text(first + script.read_text())
    write_spec(tmp_path, f"""
        name: {name}
        script: train.py
        args: ["--batch-size", "{{batch_size}}", "--width", "4", "--device", "{{device}}"]
        device: cpu
        space: {{batch_size: [16]}}
        trial: {{warmup_steps: 1, measure_steps: 3, min_measure_s: 0.1, timeout_s: 120}}
    """)


def test_report_best_and_check_beside_a_sweep_still_checking_its_script_say_it_is_starting(tmp_path: Path) -> None:
    """A tour: ``report`` run while a new sweep's smoke step ran said "no study ...; run
    `orchestrate spec.yaml` first" (the study is made after the script is checked, and the lock was
    taken then): pasted, it was refused as a second sweep of the study. The sweep now holds the
    study's lock from before its probe, and a reader told there is no study names it."""
    import time

    from conftest import orchestrate_popen

    gate = tmp_path / "GO"
    example_before(tmp_path, "starting", f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n")
    sweep = orchestrate_popen(["spec.yaml"], tmp_path)
    try:
        deadline, said = time.monotonic() + 90, ""
        while "is starting" not in said and time.monotonic() < deadline and sweep.poll() is None:
            said = command(["report", "spec.yaml"], tmp_path).stderr
            time.sleep(0.2)
        assert sweep.poll() is None and said.count("\n") == 1, said  # waiting at the gate, in its smoke step
        assert said.startswith(f"orchestrate: no study 'starting' in sqlite:///{tmp_path}/mlruns/optuna.db yet: a "
                               f"sweep of it is starting (orchestrate pid {sweep.pid}, checking the script"), said
        for words in (["best", "spec.yaml"], ["check", "spec.yaml"]):
            proc = command(words, tmp_path)
            assert proc.returncode == 2 and "a sweep of it is starting" in proc.stderr, proc.stderr
        gate.touch()
        out, err = sweep.communicate(timeout=240)
    finally:
        gate.touch()
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, out + err
    assert command(["best", "spec.yaml"], tmp_path).stdout.startswith("python train.py --batch-size 16 ")


def test_a_script_that_reads_stdin_reads_an_empty_one_and_says_so(tmp_path: Path) -> None:
    """The fault tour: a script that asked a question (``input()``) read the launcher's order pipe,
    its stdin, and waited: the smoke step said it took more than 10 s without a step, and with
    ``--no-check`` every trial timed out, a final result. Its stdin is /dev/null now: it fails at
    once with its own error, an 'error' that runs again once the script is mended."""
    example_before(tmp_path, "asks", "answer = input('overwrite the checkpoint? ')\n")
    checked = orchestrate(["spec.yaml"], tmp_path)
    assert checked.returncode == 2 and "EOFError: EOF when reading a line" in checked.stderr, checked.stderr
    run = orchestrate(["spec.yaml", "--no-check"], tmp_path)
    [trial] = load_study(tmp_path, "asks").trials
    assert trial.user_attrs["status"] == "error" and "EOFError" in trial.user_attrs["detail"], run.stdout + run.stderr
    assert processes_under(tmp_path) == []


OWN_BATCHES = """
    import argparse, torch
    p = argparse.ArgumentParser(); p.add_argument("--batch-size", type=int); a = p.parse_args()
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(1_000_000):  # ended by the harness once its window closes
        x = torch.randn(a.batch_size, 8)  # batches made in the loop: no DataLoader yields them
        opt.zero_grad(); model(x).sum().backward(); opt.step()
"""


def test_a_script_without_a_dataloader_is_told_to_set_samples_per_step_before_any_trial(tmp_path: Path) -> None:
    """The fault tour: a script that builds its own batches passed the dry run and the smoke step,
    then every trial failed alike ("set samples_per_step in the spec"), 6 of 6 in 30 s. The smoke
    step counts the DataLoader batches drawn before the first step; none, and no samples_per_step:
    one line on the script before any trial. Given one, it is measured."""
    (tmp_path / "own.py").write_text(textwrap.dedent(OWN_BATCHES))
    spec = write_spec(tmp_path, """
        name: own
        script: own.py
        args: ["--batch-size", "{batch_size}"]
        device: cpu
        space: {batch_size: [16, 32]}
        trial: {warmup_steps: 1, measure_steps: 3, min_measure_s: 0.05}
    """)
    proc = orchestrate(["spec.yaml"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("spec.yaml:2: script: own.py drew no batch from a torch DataLoader before its first "
                                  "optimizer step (found by the smoke step), so the samples it trains on cannot be "
                                  "counted: set samples_per_step in the spec"), proc.stderr
    assert not (tmp_path / "mlruns").exists()  # nothing made
    spec.write_text(spec.read_text() + "samples_per_step: batch_size\n")
    given = orchestrate(["spec.yaml"], tmp_path)
    assert given.returncode == 0 and "2 of 2 trials have a result (2 ok)" in given.stdout, given.stdout + given.stderr
