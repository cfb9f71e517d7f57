"""``BatchFlag``: two trials of different ``batch_size`` whose script drew the same samples per
optimizer step are said once; a script that steps over micro-batches (its count not equal to its
``batch_size``, but different for different batches) is not, nor a module's sweep, nor a count the
spec gave (``samples_per_step``). Pure: results as the harness writes them."""

from __future__ import annotations

from orchestrator.outcome import Outcome, Status
from orchestrator.protocol import TrialResult
from orchestrator.report.batchflag import BatchFlag


def ok(per_step: float, counted: str = "dataloader") -> Outcome:
    return Outcome(Status.OK, result=TrialResult("ok", info={"samples_counted": counted, "samples_per_step": per_step}))


def test_the_same_samples_for_two_batch_sizes_are_said_once() -> None:
    flag = BatchFlag(True, {"batch_size": None, "lr": None})
    assert flag.line(0, {"batch_size": 32}, ok(16.0)) is None
    assert flag.line(1, {"batch_size": 32}, ok(16.0)) is None  # the same batch again: nothing to tell
    line = flag.line(2, {"batch_size": 128}, ok(16.0))
    assert line is not None and line.startswith("orchestrate: trials #0 (batch_size=32) and #2 (batch_size=128) both "
                                                "drew 16 samples per optimizer step from the script's DataLoader")
    assert flag.line(3, {"batch_size": 256}, ok(16.0)) is None  # once


def test_micro_batches_a_module_and_a_given_count_are_not_said() -> None:
    micro = BatchFlag(True, {"batch_size": None})  # batch_size per device, two micro-batches a step
    assert [micro.line(n, {"batch_size": b}, ok(2.0 * b)) for n, b in enumerate((16, 32, 64))] == [None] * 3
    module = BatchFlag(False, {"batch_size": None})
    assert [module.line(n, {"batch_size": b}, ok(16.0)) for n, b in enumerate((16, 32))] == [None] * 2
    given = BatchFlag(True, {"batch_size": None})
    assert [given.line(n, {"batch_size": b}, ok(8.0, "samples_per_step")) for n, b in enumerate((16, 32))] == [None] * 2
    failed = BatchFlag(True, {"batch_size": None})
    assert failed.line(0, {"batch_size": 16}, ok(16.0)) is None
    assert failed.line(1, {"batch_size": 32}, Outcome(Status.OOM)) is None


def test_the_same_effective_batch_through_accumulation_is_not_said_and_a_flag_ignored_elsewhere_is() -> None:
    """A tour: 8 x 4 micro-batches and 32 x 1 both draw 32 a step (the effective batch held, a
    usual sweep) and were said to be a batch size that does not reach the script; a script that
    ignored the flag only with ``--hardcode 1`` was never said, as only the first trial of each
    batch size was kept."""
    flag = BatchFlag(True, {"batch_size": None, "accum": None})
    assert flag.line(0, {"batch_size": 8, "accum": 4}, ok(32.0)) is None
    assert flag.line(1, {"batch_size": 32, "accum": 1}, ok(32.0)) is None
    assert flag.line(2, {"batch_size": 32, "accum": 4}, ok(128.0)) is None
    assert flag.line(3, {"batch_size": 8, "accum": 1}, ok(8.0)) is None
    hard = BatchFlag(True, {"batch_size": None, "hardcode": None})
    assert hard.line(0, {"batch_size": 4, "hardcode": 0}, ok(4.0)) is None
    assert hard.line(1, {"batch_size": 64, "hardcode": 0}, ok(64.0)) is None
    assert hard.line(2, {"batch_size": 4, "hardcode": 1}, ok(16.0)) is None
    line = hard.line(3, {"batch_size": 64, "hardcode": 1}, ok(16.0))
    assert line is not None and line.startswith("orchestrate: trials #2 (batch_size=4) and #3 (batch_size=64) both "
                                                "drew 16 samples per optimizer step"), line


def test_a_script_that_holds_its_step_s_samples_itself_is_not_said_and_a_study_is_read_again() -> None:
    """A review: a script that works out its accumulation from a fixed total (64 a step: 16 x 4,
    64 x 1) draws the same samples per step at every batch, in batches of another size: not a flag
    ignored (``batches_per_step`` tells them apart). ``after`` reads a study's trials again, in
    number order, for the summary, ``report`` and ``best``."""
    def drawn(per_step: float, batches: float) -> Outcome:
        return Outcome(Status.OK, result=TrialResult("ok", info={"samples_counted": "dataloader",
                                                                 "samples_per_step": per_step, "batches_per_step": batches}))
    held = BatchFlag(True, {"batch_size": None})
    assert held.line(0, {"batch_size": 16}, drawn(64.0, 4.0)) is None
    assert held.line(1, {"batch_size": 64}, drawn(64.0, 1.0)) is None
    ignored = BatchFlag(True, {"batch_size": None})
    assert ignored.line(0, {"batch_size": 16}, drawn(32.0, 1.0)) is None
    assert ignored.line(1, {"batch_size": 64}, drawn(32.0, 1.0)) is not None
    info = {"samples_counted": "dataloader", "samples_per_step": 32.0, "batches_per_step": 1.0}
    said = BatchFlag(True, {"batch_size": None}).after([(5, {"batch_size": 64}, info), (2, {"batch_size": 16}, info)])
    assert said is not None and said.startswith("orchestrate: trials #2 (batch_size=16) and #5 (batch_size=64)"), said
    assert BatchFlag(True, {"batch_size": None}).after([(2, {"batch_size": 16}, info)]) is None


def test_a_samples_per_step_the_dataloader_contradicts_is_said_once() -> None:
    """A script tour: ``samples_per_step: 1000`` over a DataLoader of batch 8 reported 1000 a step's
    throughput, and nothing said."""
    def given(per_step: float, loader: float) -> Outcome:
        return Outcome(Status.OK, result=TrialResult("ok", info={"samples_counted": "samples_per_step",
                                                                 "samples_per_step": per_step,
                                                                 "dataloader_samples_per_step": loader}))

    flag = BatchFlag(True, {"batch_size": None})
    assert flag.line(0, {"batch_size": 8}, given(8.0, 8.0)) is None  # they agree
    line = flag.line(1, {"batch_size": 32}, given(1000.0, 32.0))
    assert line == ("orchestrate: trial #1 counted 1,000 samples a step (samples_per_step), but the script's "
                    "DataLoader yielded 32 a step: samples_per_s uses the spec's figure; remove samples_per_step "
                    "to count the DataLoader's batches"), line
    assert flag.line(2, {"batch_size": 64}, given(1000.0, 64.0)) is None  # once


def test_checkpoints_saved_inside_a_window_are_said_once_with_their_time() -> None:
    """A tour's ``Trainer`` saved every 5 steps inside its windows, its time counted as training,
    and nothing said (``harness/saves.py``)."""
    def saved(count: int, per_step: float) -> Outcome:
        return Outcome(Status.OK, result=TrialResult("ok", metrics={"measure_s": 2.08, "measure_steps_done": 20.0},
                                                     info={"samples_counted": "dataloader", "samples_per_step": per_step,
                                                           "saves": count, "save_s": 0.851}))

    flag = BatchFlag(True, {"batch_size": None})
    assert flag.line(0, {"batch_size": 8}, ok(8.0)) is None
    assert flag.line(1, {"batch_size": 16}, Outcome(Status.OOM, result=saved(4, 16.0).result)) is None  # not measured
    assert flag.line(2, {"batch_size": 16}, saved(4, 16.0)) == (
        "orchestrate: trial #2 saved checkpoints in 4 of its window's 20 steps, which took 0.85 s of its 2.08-s "
        "window beyond its median step: their time counts as training; set the script's save interval beyond the "
        "window to measure training alone")
    assert flag.line(3, {"batch_size": 32}, saved(3, 32.0)) is None  # once
    every = BatchFlag(True, {"batch_size": None})  # save_steps 1: no step without one to set them against
    outcome = saved(20, 8.0)
    assert outcome.result is not None and outcome.result.info is not None
    outcome.result.info["save_s"] = None
    assert every.line(0, {"batch_size": 8}, outcome) == (
        "orchestrate: trial #0 saved checkpoints in 20 of its window's 20 steps: their time counts as training; set "
        "the script's save interval beyond the window to measure training alone")


def test_a_searched_knob_a_trial_could_not_apply_is_said_once() -> None:
    """An experiment tour: activation_checkpointing swept over a workload that lists no blocks did
    nothing, and only result.json said so; the sweep ranked its values as if they differed."""
    def unapplied() -> Outcome:
        return Outcome(Status.OK, result=TrialResult("ok", not_applied={
            "activation_checkpointing": "the experiment lists no blocks to checkpoint", "cpu_isa": "fixed elsewhere"}))
    flag = BatchFlag(False, {"batch_size": None, "activation_checkpointing": None})
    assert flag.line(0, {"activation_checkpointing": True}, unapplied()) == (
        "orchestrate: trial #0 could not apply activation_checkpointing (the experiment lists no blocks to "
        "checkpoint): the configurations that differ only in activation_checkpointing measure the same training")
    assert flag.line(1, {"activation_checkpointing": True}, unapplied()) is None  # once; cpu_isa is not searched
