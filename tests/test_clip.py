"""No message is cut inside a word: ``clip`` gives the first line whole, or cuts it at a word
with "…" (a table of inputs, the real messages of a CPU out-of-memory error and a
predicted-OOM skip among them), and the places that print excerpts use it."""

from __future__ import annotations

import pytest

from orchestrator.clip import clip, short_detail
from orchestrator.report.summary import trial_line

CPU_OOM = ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
           "you tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory)")
SKIPPED = ("predicted out of memory: needs at least as much memory as trial 12, which ran out of memory "
           "(or swapped)")


@pytest.mark.parametrize("text, width, expected", [
    ("short enough", 12, "short enough"),
    ("short enough", 11, "short…"),
    ("first line\nsecond line that is long", 20, "first line"),  # the whole first line, no more
    ("\n\n  padded first  \nmore", 40, "padded first"),
    ("One sentence here. Another sentence that runs on and on.", 30, "One sentence here. Another…"),
    ("a b c d e f g h", 6, "a b c…"),
    ("supercalifragilistic", 10, "supercali…"),  # one word longer than the line: the only cut inside a word
    ("needs memory (or swapped) later", 22, "needs memory…"),  # not "(or…": the aside goes whole
    (SKIPPED, 100, "predicted out of memory: needs at least as much memory as trial 12, which ran out of memory…"),
    (SKIPPED, 120, SKIPPED),
    ("", 10, ""),
])
def test_clip(text: str, width: int, expected: str) -> None:
    out = clip(text, width)
    assert out == expected
    assert len(out) <= width


@pytest.mark.parametrize("width", range(20, 140, 7))
def test_every_cut_of_a_real_message_ends_at_a_word(width: int) -> None:
    out = short_detail(CPU_OOM, width)
    assert len(out) <= width and "enforce fail" not in out
    source = CPU_OOM.replace("[enforce fail at alloc_cpu.cpp:127] err == 0. ", "")
    kept = out.removesuffix("…").rstrip()
    assert source.startswith(kept), out
    assert out == source or source[len(kept)] in " .,;:(", out  # what is kept ends where a word ends


def test_the_live_oom_line_says_what_was_tried_whole() -> None:
    line = trial_line(4, {"batch_size": 4096, "dtype": "float32"}, "oom", {}, 7.5, CPU_OOM)
    assert line.endswith("(RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                         "2147483648 bytes. Error code 12…)"), line  # the aside it cannot close is left out


USAGE = ("the script exited (exit code 2) before its first optimizer step; it printed: usage: train.py [-h] "
         "[--batch-size BATCH_SIZE] | [--grad-accum GRAD_ACCUM] [--lr LR] | train.py: error: argument "
         "--precision: invalid choice: 'fp8' (choose from no, fp16, bf16)")


@pytest.mark.parametrize("width", range(60, 200, 9))
def test_a_script_s_failure_keeps_the_end_of_what_it_printed(width: int) -> None:
    """A tour: argparse's refusal of ``fp8`` is its last line, after the usage lines; the trial's
    line kept the failure and the usage's first words, and cut the refusal off."""
    out = short_detail(USAGE, width)
    head, said, tail = out.partition("; it printed: ")
    assert len(out) <= width and said, out
    assert head.startswith("the script exited") and USAGE.startswith(head.removesuffix("…"))
    assert tail.endswith("fp16, bf16)") and USAGE.endswith(tail.removeprefix("…"))
    assert tail.removeprefix("…")[0] != " " and (tail[0] != "…" or USAGE[USAGE.index(tail[1:]) - 1] == " ")
    if width >= 110:
        assert "invalid choice: 'fp8'" in tail, out
    assert short_detail(USAGE, len(USAGE)) == USAGE


def test_a_script_s_exception_is_kept_before_what_it_printed() -> None:
    """A Lightning tour: its last printed line is a tip, and the exception was cut to
    ``RuntimeError: SaveConfigCallback…`` to keep it."""
    detail = ("RuntimeError: SaveConfigCallback expected /p/config.yaml to NOT exist. Aborting to avoid overwriting "
              "results of a previous run. at train_cli.py:40; it printed: 💡 Tip: For seamless cloud logging and "
              "experiment tracking, try installing [litlogger] to enable LitLogger, which logs metrics and "
              "artifacts automatically to the Lightning Experiments platform.")
    assert short_detail(detail, 120) == clip(detail, 120)
    assert short_detail(detail, 120).startswith("RuntimeError: SaveConfigCallback expected /p/config.yaml to NOT exist.")
