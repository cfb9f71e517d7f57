"""The script runner's parts: what a batch counts as (a table of batch shapes), what a script
imports at its top level (the fork server's preload), why a script cannot run, and the steps and
samples counted by a real script run in a real trial process (``harness/script.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import UserDict
from pathlib import Path

import pytest
import torch

from orchestrator.protocol import ScriptCall, TrialConfig, TrialSteps, encode_config
from orchestrator.harness.batches import first_dimension
from orchestrator.harness.scriptfile import describe_failure, last_lines, top_level_imports
from orchestrator.scriptsource import check_source


class Encoding(UserDict):
    """A mapping that is no dict, as transformers' BatchEncoding."""


@pytest.mark.parametrize("batch, expected", [
    (torch.zeros(8, 3), (8, None)),
    ((torch.zeros(4, 2), torch.zeros(4)), (4, None)),
    ([torch.zeros(5, 1), torch.zeros(5)], (5, None)),
    ({"input_ids": torch.zeros(6, 128, dtype=torch.long), "labels": torch.zeros(6)}, (6, 768)),
    (Encoding(input_ids=torch.zeros(2, 10, dtype=torch.long)), (2, 20)),
    ({"pixels": torch.zeros(3, 3, 8, 8), "label": torch.zeros(3)}, (3, None)),
    ({"meta": "x", "inner": {"x": torch.zeros(7)}}, (7, None)),
    (torch.tensor(1.0), (None, None)),
    ("text", (None, None)),
    ([], (None, None)),
], ids=["tensor", "tuple", "list", "hf-dict", "mapping", "dict", "nested", "scalar", "str", "empty"])
def test_a_batch_counts_its_first_dimension(batch: object, expected: tuple) -> None:
    assert first_dimension(batch) == expected


IMAGE = (torch.zeros(3, 32, 32), {"boxes": torch.zeros(2, 4), "labels": torch.zeros(2)})


@pytest.mark.parametrize("collate, size, expected", [
    (lambda items: tuple(zip(*items)), 8, (8, None)),  # torchvision's detection collate: counted 3 (channels)
    (lambda items: tuple(zip(*items)), 5, (5, None)),  # an epoch's last, shorter batch
    (lambda items: items, 8, (8, None)),  # the list of examples itself
    (lambda items: [x for x, _ in items], 8, (8, None)),  # per-example tensors: counted 3 (channels)
    (lambda items: [torch.zeros(128) for _ in items], 5, (5, None)),  # an epoch's last: counted 128 (its length)
    (lambda items: [torch.tensor(1.0) for _ in items], 5, (5, None)),  # per-example scalars' last: counted none
    (lambda items: [torch.zeros(len(items), 64), torch.zeros(len(items))], 5, (5, None)),  # stacked fields' last
], ids=["zip-collate", "zip-collate-last", "list-of-examples", "list-of-tensors", "list-of-sequences-last",
        "list-of-scalars-last", "stacked-fields-last"])
def test_a_batch_of_examples_counts_its_examples(collate: object, size: int, expected: tuple) -> None:
    """The tour's detection script was counted 3 samples a step at every batch size (an image's
    channels), and the sweep then said the batch size did not reach the script; the loader's
    ``batch_size`` settles what the shape leaves open."""
    assert first_dimension(collate([IMAGE] * size), 8) == expected  # type: ignore[operator]


def test_per_example_mappings_count_one_each_and_their_tokens() -> None:
    """The tour's ``collate_fn=lambda items: items`` over ``{"input_ids": ..., "label": ...}``
    examples was counted as its first example's length (25.8 and 23.8 samples a step at batches
    8 and 32)."""
    batch = [{"input_ids": torch.zeros(20 + i, dtype=torch.long), "label": 1} for i in range(8)]
    assert first_dimension(batch) == (8, sum(20 + i for i in range(8)))


def test_top_level_imports_are_read_without_running_the_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import os, json as j
        from transformers import Trainer
        from . import local
        try:
            import lightning.pytorch as pl
        except ImportError:
            pass
        if True:
            import accelerate
        def main():
            import inside_a_function
        raise SystemExit("this line never runs")
    """))
    assert top_level_imports(str(script)) == ["os", "json", "transformers", "lightning.pytorch", "accelerate"]
    assert top_level_imports(str(tmp_path / "missing.py")) == []


def test_a_script_that_cannot_run_says_where(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\nif x\n")
    assert check_source(str(broken)) == f"{broken}:2: SyntaxError: expected ':'"
    assert check_source(str(tmp_path / "gone.py")).startswith("cannot read the script ")
    (tmp_path / "fine.py").write_text("print(1)\n")
    assert check_source(str(tmp_path / "fine.py")) is None


def test_a_failure_line_names_the_script_s_line_and_its_last_output(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "trial.log"
    log.write_text("loading\n\nepoch 0\n" + "x" * 500 + "\nlast words\n")
    assert last_lines(log, n=2, limit=40) == "..." + ("x" * 500 + " | last words")[-40:]
    script = tmp_path / "train.py"
    script.write_text("def f():\n    raise ValueError('bad batch')\nf()\n")
    try:
        exec(compile(script.read_text(), str(script), "exec"), {})
    except ValueError as exc:
        line = describe_failure(exc, str(script), str(log), "ValueError: bad batch")
    assert line.startswith(f"ValueError: bad batch at {script}:2; it printed: ")
    assert line.endswith("last words")
    script.write_text("import os\nos.environ['NOT_SET_HERE_' + 'X']\n")  # raised inside <frozen os>
    monkeypatch.chdir(tmp_path)  # a script run from its own folder: "<frozen os>" made absolute is "in" it
    try:
        exec(compile(script.read_text(), str(script), "exec"), {})
    except KeyError as exc:
        import traceback

        assert traceback.extract_tb(exc.__traceback__)[-1].filename == "<frozen os>"
        line = describe_failure(exc, str(script), None, "KeyError: 'NOT_SET_HERE_X'")
    assert line == "KeyError: 'NOT_SET_HERE_X' at train.py:2", line  # not "<frozen os>:679", "in" its folder


def run_trial(tmp_path: Path, source: str, argv: list[str], steps: TrialSteps, per_step: float | None = None,
              timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], dict]:
    """A script trial, cold (``python -m orchestrator.harness CONFIG.json``), as the launcher
    writes it; its result file."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    result = tmp_path / "result.json"
    config = TrialConfig(str(script), {"device": "cpu"}, steps, 0, result_path=str(result), watch_parent=False,
                         script=ScriptCall(str(script), argv, per_step))
    (tmp_path / "config.json").write_text(encode_config(config))
    with open(tmp_path / "trial.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "orchestrator.harness", str(tmp_path / "config.json")],
                              stdout=log, stderr=subprocess.STDOUT, text=True, timeout=timeout, cwd=tmp_path)
    return proc, json.loads(result.read_text())


LOOP = """
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    bs, accum = int(sys.argv[1]), int(sys.argv[2])
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(48, 8), torch.zeros(48, dtype=torch.long)), batch_size=bs)
    for epoch in range(100000):
        for i, (x, y) in enumerate(loader):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
        print("epoch", epoch, flush=True)
    print("the loop ran to its end")
"""


def test_a_script_trial_counts_accumulated_steps_and_their_samples_then_ends_at_its_window(tmp_path: Path) -> None:
    proc, result = run_trial(tmp_path, LOOP, ["4", "3"], TrialSteps(2, 7, 0.0))
    assert proc.returncode == 0 and result["status"] == "ok", result
    m = result["metrics"]
    assert m["measure_steps_done"] == 7 and result["info"]["samples_per_step"] == 12.0  # 3 micro-batches of 4
    assert m["samples_per_s"] == pytest.approx(7 * 12 / m["measure_s"])
    assert m["startup_s"] > 0 and m["peak_memory_gib"] > 0 and m["step_time_ms_p50"] > 0
    others = m["host_cpu_others"]  # None only where no CPU tick passed in the window (a few ms)
    assert (others is None and m["measure_s"] < 0.05) or 0.0 <= others <= 1.0, (others, m["measure_s"])
    assert "the loop ran to its end" not in (tmp_path / "trial.log").read_text()  # ended at its window
    assert result["timeline"]["warmup_done"] <= result["timeline"]["window_start"] < result["timeline"]["window_end"]


def test_a_script_s_window_closes_at_its_precision_as_a_module_s_does(tmp_path: Path) -> None:
    proc, result = run_trial(tmp_path, LOOP, ["4", "1"], TrialSteps(2, 100000, 0.0, 0.5))
    assert proc.returncode == 0 and result["status"] == "ok", result
    m = result["metrics"]
    assert 5 <= m["measure_steps_done"] < 100000 and m["throughput_ci95"] <= 0.5


def test_samples_per_step_from_the_spec_replaces_the_count(tmp_path: Path) -> None:
    source = """
        import torch
        w = torch.nn.Parameter(torch.zeros(4))
        opt = torch.optim.SGD([w], lr=0.1)
        while True:
            (w.sum() ** 2).backward()
            opt.step()
    """
    proc, result = run_trial(tmp_path, source, [], TrialSteps(1, 5, 0.0), per_step=32.0)
    assert result["status"] == "ok" and result["info"] == {"samples_counted": "samples_per_step",
                                                          "samples_per_step": 32.0}
    proc, result = run_trial(tmp_path, source, [], TrialSteps(1, 5, 0.0))
    assert result["status"] == "error"
    assert result["detail"] == ("set samples_per_step in the spec: no samples counted in the window's 5 steps (the "
                                "script drew no batch from a torch DataLoader, or its batches hold no tensor the "
                                "harness can count, such as a dataclass)")  # the remedy first: lines are clipped
    # the harness's own words: not "RuntimeError: ... at train.py:N", as if the script had raised it


def test_a_script_that_ends_early_says_how_far_it_got_and_what_it_printed(tmp_path: Path) -> None:
    source = LOOP.replace("range(100000)", "range(1)")
    proc, result = run_trial(tmp_path, source, ["8", "1"], TrialSteps(2, 10, 0.0))
    assert proc.returncode == 0 and result["status"] == "error"
    assert result["detail"] == ("the script ended after 6 optimizer step(s), before its window closed (2 warm-up + "
                                "10 measured steps and 0 s): let it train for longer (more epochs or steps); it "
                                "printed: epoch 0 | the loop ran to its end")


def test_a_script_that_fails_before_stepping_is_not_told_it_never_steps() -> None:
    """``--no-check`` and a flag the script does not know: argparse exits 2 before any step, and the
    line said "a script that never calls [optimizer.step] cannot be measured", which misled."""
    from orchestrator.harness.script import ScriptEnded

    assert str(ScriptEnded(2, 0, 0, "")) == "the script exited (exit code 2) before its first optimizer step"
    assert str(ScriptEnded(0, 0, 0, "")).startswith("the script exited (exit code 0) without stepping an optimizer")
    assert str(ScriptEnded(None, 0, 0, "")).startswith("the script exited without stepping an optimizer")


@pytest.mark.parametrize("every", [1, 2])
def test_an_evaluation_loader_between_steps_is_not_counted(tmp_path: Path, every: int) -> None:
    """An evaluation every step or every 2 steps, iterated with gradients on (the ``Trainer``'s loop
    turns them off only around the forward): its batches of 50 are another dataset's, drawn
    whole between two steps, never last before one; the training loader's count stays 8 a step (2 x 4).
    Every step (a tour's ``Trainer`` with ``eval_steps`` 1) it was counted as training: 5x."""
    source = LOOP.replace("""                opt.zero_grad()""", f"""                opt.zero_grad()
                if i % {2 * every} == {2 * every - 1}:
                    for xe, _ in evaluation:
                        with torch.no_grad():
                            model(xe)""").replace("""    for epoch""", """    evaluation = DataLoader(TensorDataset(torch.randn(100, 8), torch.zeros(100)), batch_size=50)
    for epoch""")
    assert source.count("evaluation") == 2
    proc, result = run_trial(tmp_path, source, ["4", "2"], TrialSteps(2, 8, 0.0))
    assert proc.returncode == 0 and result["status"] == "ok", result
    assert result["info"]["samples_per_step"] == 8.0 and result["info"]["other_batches"] >= 6, result["info"]
    assert result["metrics"]["samples_per_s"] == pytest.approx(8 * 8 / result["metrics"]["measure_s"])



def test_checkpoints_saved_inside_the_window_are_counted_and_timed(tmp_path: Path) -> None:
    """A checkpoint every 3 steps (``torch.save``, as a ``Trainer``'s ``save_steps`` writes its
    optimizer): its time is the window's, so the result says in how many steps and how long;
    those before the window are not counted, and a script that saves nothing says nothing
    (``test_samples_per_step_from_the_spec_replaces_the_count``'s whole ``info``)."""
    source = LOOP.replace("""                opt.zero_grad()""", """                opt.zero_grad()
                saves += 1
                if saves % 3 == 0:
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, "ckpt.pt")""").replace(
        "    for epoch", "    saves = 0\n    for epoch")
    proc, result = run_trial(tmp_path, source, ["4", "1"], TrialSteps(4, 12, 0.0))
    assert proc.returncode == 0 and result["status"] == "ok", result
    # saves after steps 6, 9, 12 and 15 fall in the window (steps 4-16); after step 3 before it
    assert result["info"]["saves"] == 4 and 0 < result["info"]["save_s"] < result["metrics"]["measure_s"], result["info"]
    assert (tmp_path / "ckpt.pt").exists() and result["info"]["samples_per_step"] == 4.0


def test_a_save_s_time_is_set_against_the_steps_without_one() -> None:
    """A review: with a save in most steps the median step was a save's, and the time read 0.00 s."""
    from orchestrator.harness.saves import figures

    assert figures(set(), [5.0, 5.0]) == {}
    assert figures({0, 1, 2}, [85.0, 90.0, 95.0, 5.0]) == {"saves": 3, "save_s": pytest.approx(0.255)}
    assert figures({0, 1}, [85.0, 90.0]) == {"saves": 2, "save_s": None}  # save_steps 1: nothing to set against


DDP = """
    import datetime, os, subprocess, sys, tempfile
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:  # as Lightning's strategy="ddp": rank 0 stays, the other ranks are its children
        os.environ["INIT"] = "file://" + tempfile.mktemp()
        subprocess.Popen([sys.executable, sys.argv[0]], env={**os.environ, "RANK": "1"})
    dist.init_process_group("gloo", init_method=os.environ["INIT"], rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=30))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(4096, 8), torch.zeros(4096, dtype=torch.long))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=2, rank=rank))
    for epoch in range(1000):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize("per_step", [None, 16.0])
def test_a_script_that_trains_in_two_ranks_counts_both(tmp_path: Path, per_step: float | None) -> None:
    """A Lightning tour: ``strategy="ddp"`` with 2 devices keeps rank 0 in the trial's process and
    starts rank 1 as its child; the harness saw rank 0's batches alone and recorded half the job's
    throughput, with nothing said. Each rank trains its own batches: rank 0's count times 2. A
    ``samples_per_step`` the spec gives is the job's, taken as it is: nothing scaled, nothing said
    of ranks, and the DataLoader's count it is checked against is the job's too."""
    proc, result = run_trial(tmp_path, DDP, [], TrialSteps(2, 6, 0.0), per_step=per_step, timeout=180)
    assert proc.returncode == 0 and result["status"] == "ok", result
    assert result["info"]["samples_per_step"] == 16.0, result["info"]
    assert result["metrics"]["samples_per_s"] == pytest.approx(6 * 16 / result["metrics"]["measure_s"])
    if per_step is None:
        assert result["info"]["world_size"] == 2, result["info"]
    else:
        assert "world_size" not in result["info"] and result["info"]["dataloader_samples_per_step"] == 16.0


TWO_LOADERS = """
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    a = DataLoader(TensorDataset(torch.randn(4096, 8), torch.zeros(4096, dtype=torch.long)), batch_size=4)
    b = DataLoader(TensorDataset(torch.randn(4096, 8), torch.zeros(4096, dtype=torch.long)), batch_size=2)
    ia, ib = iter(a), iter(b)
    for i in range(100000):
        batches = [next(ia), next(ib)] if sys.argv[1] == "both" else [next(ia) if i % 2 else next(ib)]
        for x, y in batches:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("how, per_step", [("both", 6.0), ("turns", 3.0)])
def test_two_training_loaders_are_both_counted(tmp_path: Path, how: str, per_step: float) -> None:
    """Two tasks' loaders, both drawn every step (4 + 2 samples) or in turns (4, 2, 4, ...): both
    are training, unlike an evaluation every N steps, drawn between two steps and never last."""
    proc, result = run_trial(tmp_path, TWO_LOADERS, [how], TrialSteps(2, 8, 0.0))
    assert proc.returncode == 0 and result["status"] == "ok", result
    assert result["info"]["samples_per_step"] == per_step and "other_batches" not in result["info"], result["info"]


def test_a_loader_replayed_by_itertools_cycle_is_refused_not_undercounted(tmp_path: Path) -> None:
    """A tour's step-based loop over ``itertools.cycle(DataLoader(...))``: cycle replays the first
    pass's batches without the loader's iterator, so 4.27 samples a step were counted at batch 32,
    and nothing said. The same loop over the loader itself counts its 32."""
    source = """
        import itertools
        import sys
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        model = torch.nn.Linear(16, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(320, 16), torch.zeros(320, dtype=torch.long)), batch_size=32)
        batches = itertools.cycle(loader) if sys.argv[1] == "cycle" else (b for _ in range(10**6) for b in loader)
        for step in range(100000):
            x, y = next(batches)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    """
    proc, result = run_trial(tmp_path, source, ["cycle"], TrialSteps(2, 30, 0.0))
    assert result["status"] == "error", result
    assert result["detail"].startswith("set samples_per_step in the spec: the script's DataLoader yielded no batch "
                                       "in the last 23 of the window's 30 optimizer steps"), result["detail"]  # 10 a pass
    proc, result = run_trial(tmp_path, source, ["loader"], TrialSteps(2, 30, 0.0))
    assert result["status"] == "ok" and result["info"]["samples_per_step"] == 32.0, result


def test_the_harness_s_own_finding_ends_a_script_that_catches_every_exception(tmp_path: Path) -> None:
    """A script tour: a step wrapped in ``except Exception`` swallowed the harness's "set
    samples_per_step" raised from its optimizer hook, trained on until ``timeout_s``, and was
    recorded ``timeout``. It is now the ``error`` it is, at the window's end."""
    source = """
        import torch
        w = torch.nn.Parameter(torch.zeros(4))
        opt = torch.optim.SGD([w], lr=0.1)
        while True:
            try:
                (w.sum() ** 2).backward()
                opt.step()
            except Exception as exc:
                print("skipping batch", exc, flush=True)
    """
    proc, result = run_trial(tmp_path, source, [], TrialSteps(1, 5, 0.0), timeout=60)
    assert proc.returncode == 0 and result["status"] == "error", result
    assert result["detail"].startswith("set samples_per_step in the spec: no samples counted"), result["detail"]
    assert "skipping batch" not in (tmp_path / "trial.log").read_text()


LAYOUTS = """
    import sys
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):  # ((image, features), label): a siamese or multi-input model's examples
        def __len__(self): return 4096
        def __getitem__(self, i): return (torch.randn(3, 4, 4), torch.randn(5)), i % 2

    class Sequences(Dataset):
        def __len__(self): return 4096
        def __getitem__(self, i): return torch.randn(7 + i % 5, 4), i % 2

    def sequence_first(items):  # (L, B, 4): nn.LSTM's default layout, padded to the longest
        return pad_sequence([x for x, _ in items]), torch.tensor([y for _, y in items])

    bs, layout = int(sys.argv[1]), sys.argv[2]
    loader = DataLoader(Pairs(), batch_size=bs) if layout == "pairs" else \\
        DataLoader(Sequences(), batch_size=bs, collate_fn=sequence_first)
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=0.1)
    for epoch in range(1000):
        for batch in loader:
            (w.sum() ** 2).backward()
            opt.step()
"""


@pytest.mark.parametrize("layout", ["pairs", "sequence-first"])
def test_a_batching_loader_counts_the_examples_it_fetched_whatever_the_collate_made(tmp_path: Path, layout: str) -> None:
    """A script tour: a default-collated ``((image, features), label)`` was counted 2 samples a step
    at batches 16 and 128 (the smaller "won" at 825 samples/s against a real 6,713), a
    sequence-first ``(L, B)`` batch its padded length; the sweep then said the batch size did not
    reach the script. A loader that batches by ``batch_size`` fetched that many examples."""
    proc, result = run_trial(tmp_path, LAYOUTS, ["6", layout], TrialSteps(1, 5, 0.0))
    assert result["status"] == "ok" and result["info"]["samples_per_step"] == 6.0, result


def test_fetched_is_the_batch_size_and_an_epoch_s_rest_or_none_where_the_loader_does_not_batch() -> None:
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler, TensorDataset

    from orchestrator.harness.batches import fetched

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.zeros(10, 2))

    def counts(loader: DataLoader) -> list[int | None]:
        it = iter(loader)
        return [fetched(it) for _ in it]

    data = TensorDataset(torch.zeros(10, 2))
    assert counts(DataLoader(data, batch_size=4)) == [4, 4, 2]  # the epoch's last: the rest
    assert counts(DataLoader(data, batch_size=4, drop_last=True)) == [4, 4]
    assert counts(DataLoader(data, batch_size=4, num_workers=2)) == [4, 4, 2]
    assert counts(DataLoader(Stream(), batch_size=4)) == [4, 4, 4]  # an iterable's last counts whole
    assert counts(DataLoader(data, batch_size=None)) == [None] * 10  # not batched: the shape says
    own = BatchSampler(SequentialSampler(data), 4, False)
    assert counts(DataLoader(data, batch_sampler=type("Buckets", (BatchSampler,), {})(own.sampler, 4, False))) == [None] * 3


def test_a_compiled_optimizer_step_does_not_trace_the_harness_s_step_hook(tmp_path: Path) -> None:
    """A script tour: ``torch.compile(optimizer.step)`` (PyTorch's recipe) ran the step hook in its
    graph; each step's new marks recompiled it, 40 ms a step against 0.6 ms, until Dynamo's
    recompile limit, and the compiled step ranked far behind eager. The hook is not traced."""
    source = """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.optim.optimizer import _global_optimizer_post_hooks
        print("hooks traced:", [h for h in _global_optimizer_post_hooks.values()
                                if not getattr(h, "_torchdynamo_disable", False)], flush=True)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = torch.compile(opt.step, backend="eager")
        loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long)), batch_size=8)
        for epoch in range(1000):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                step()
                opt.zero_grad()
    """
    proc, result = run_trial(tmp_path, source, [], TrialSteps(1, 12, 0.0))
    log = (tmp_path / "trial.log").read_text()
    assert result["status"] == "ok" and result["info"]["samples_per_step"] == 8.0, result
    assert "hooks traced: []" in log and "recompile" not in log.lower(), log


def test_a_thread_count_the_script_sets_before_importing_torch_is_the_one_it_runs_with(tmp_path: Path) -> None:
    """A script tour: ``os.environ["OMP_NUM_THREADS"] = "1"`` before ``import torch`` (as many
    scripts start) gave 1 thread as ``python train.py`` and 2 in the trial, whose torch was
    imported before the script ran; its record said the variable's 1. (The tests' own processes
    run with 1: here the script asks for 2.)"""
    source = """
        import os
        os.environ["OMP_NUM_THREADS"] = "2"
        import torch
        w = torch.nn.Parameter(torch.zeros(4))
        opt = torch.optim.SGD([w], lr=0.1)
        while True:
            (w.sum() ** 2).backward()
            opt.step()
            print("threads", torch.get_num_threads(), flush=True)
    """
    proc, result = run_trial(tmp_path, source, [], TrialSteps(1, 5, 0.0), per_step=4.0)
    assert result["status"] == "ok", result
    assert result["placement"]["threads"] == 2 and result["placement"]["OMP_NUM_THREADS"] == "2", result["placement"]
    assert "threads 1" not in (tmp_path / "trial.log").read_text()
