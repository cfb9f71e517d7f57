"""A user's training script, run unchanged as ``__main__`` in the trial's process, and measured
from outside, without its help.

Reads top to bottom: ``run`` applies the process-wide knobs, puts two counters in torch's way
(``Meter``) and runs the script with ``runpy``; the meter opens and closes the timed window from
within the script's own optimizer steps, and at the window's end hands the figures to ``finish``,
which writes the result and ends the process: the script need not finish, and its DataLoader
workers and children end with it (the launcher kills the trial's process group).

- **Steps**: torch's global optimizer step hooks (``register_optimizer_step_post_hook``) fire for
  every ``Optimizer.step()`` of every optimizer in the process, whoever calls it: a plain loop,
  Hugging Face's ``Trainer`` (through Accelerate), Lightning. A step the ``GradScaler`` skips fires
  none; gradient accumulation fires once per accumulated group.
- **Samples**: the examples of every batch a ``torch.utils.data.DataLoader`` yields (``batches``:
  those it fetched where it batches by ``batch_size``, else the batch's first dimension), counted
  where every DataLoader's iterator yields (``_BaseDataLoaderIter.__next__``), so that a wrapper
  that iterates the user's loader (Accelerate's ``DataLoaderShard``, Lightning's fetchers) is
  counted once; tokens: the elements of a mapping's ``input_ids``. Only the training loaders' batches count (``Meter.counted``: drawn from in
  most of the window's steps, or last before a quarter of them); an evaluation loader's batches
  (drawn with gradients off, as Lightning's, or iterated whole between two steps and never last
  before one, as the ``Trainer``'s, however often) are left out, and said (``info["other_batches"]``). ``samples_per_step``
  from the spec replaces the count where the script draws no batch from a DataLoader.
- **The window**: the first ``warmup_steps`` steps are not measured; the device is synchronized
  at the window's edges only (``# sync point``), then the launcher's gate is waited at, as for a
  module (``Progress.before_window``); it closes as a module's does (``harness/window.py``): after
  ``measure_steps`` steps and ``min_measure_s`` seconds, or sooner with ``precision``. Work
  between two steps (data loading, logging, evaluation, a checkpoint's save: said, ``saves``) is
  part of the step it precedes: the harness sees only the steps.

A script that exits, or raises, before its window closes ends as ``ScriptEnded`` / its exception,
which ``child.run_config`` records with the last lines the script printed (``scriptfile``).
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from orchestrator import metrics as M
from orchestrator.harness import backend, hostcpu, saves, scriptenv, swap
from orchestrator.harness.scriptenv import Unmeasurable
from orchestrator.harness.batches import counting_batches, first_dimension
from orchestrator.harness.window import StepTimes, closes
from orchestrator.harness import marks as MK
from orchestrator.protocol import ScriptCall, TrialConfig

if TYPE_CHECKING:
    from orchestrator.harness.train import Progress


class ScriptEnded(Exception):
    """The script returned (or called ``sys.exit``) before its timed window closed."""

    ended = True
    """Its message says it all (``scriptfile.describe_failure`` looks for no line of the script)."""

    def __init__(self, code: object, steps: int, samples: int, needed: str) -> None:
        self.code, self.steps, self.samples = code, steps, samples
        if steps == 0 and code not in (None, 0):  # a failure (argparse's usage error: exit 2), said by its output
            text = f"the script exited{_code(code)} before its first optimizer step"
        elif steps == 0:
            text = (f"the script exited{_code(code)} without stepping an optimizer (the harness counts "
                    "torch.optim.Optimizer.step calls in the script's own process: one that never calls one, or "
                    "trains in processes it starts (torch.multiprocessing.spawn, a launcher), cannot be measured)")
        else:
            text = (f"the script ended{_code(code)} after {steps} optimizer step(s), before its window closed "
                    f"({needed}): let it train for longer (more epochs or steps)")
        super().__init__(text)


def _code(code: object) -> str:
    if code is None:
        return ""
    return f" (exit code {code})" if isinstance(code, int) else f" ({code})"


class Meter:
    """Counts the script's optimizer steps and the samples its DataLoaders yield; opens the timed
    window after the warm-up and closes it, calling ``finish(out)`` with the figures."""

    def __init__(self, config: TrialConfig, device: str, progress: Progress, started: float,
                 finish: Callable[[dict[str, Any]], None], swap_start: swap.SwapSample,
                 abort: Callable[[BaseException], None] | None = None) -> None:
        assert config.script is not None
        self.trial, self.device, self.progress, self.started = config.trial, device, progress, started
        self.per_step = config.script.samples_per_step
        self.allow_swap = config.allow_swap
        self.finish, self.swap_start = finish, swap_start
        self.steps = 0
        """Optimizer steps so far (every optimizer's)."""
        self.drawn: dict[int, list[int]] = {}
        """Per dataset (its ``id``): [batches, samples, tokens] drawn since the window opened (before: since the start)."""
        self.between: set[int] = set()
        """The datasets drawn from, with gradients on, since the last step."""
        self.last: int | None = None
        """The dataset drawn from last, with gradients on."""
        self.drawn_at: dict[int, int] = {}
        """Per dataset: ``steps`` when it last yielded a batch. A loader replayed from a cache
        (``itertools.cycle(loader)``) stops yielding after its first pass while the script trains on."""
        self.lasts: dict[int, int] = {}
        """Per dataset: in how many of the window's steps its batch was the last before the step."""
        self.present: dict[int, int] = {}
        """Per dataset: in how many of the window's steps it was drawn from (a training loader's: nearly
        all; an evaluation every N steps: 1 in N)."""
        self.opened: dict[int, int] = {}
        """Per iterator (its ``id``) still yielding: ``steps`` at its first batch."""
        self.passes: dict[int, list[int]] = {}
        """Per dataset: [passes with no optimizer step from first batch to end, passes with one]: an
        evaluation's loader is iterated whole between two steps; a training loader's pass holds its
        steps (where the loader is not last before a step, this tells the two apart)."""
        self.saved: set[int] = set()
        """The window's steps (their index in ``marks``' intervals) that held a ``torch.save`` (``harness/saves.py``)."""
        self.window_open = False
        self.t0 = 0.0
        self.marks: list[Any] = []
        self.times = StepTimes(self.marks)
        self.driver_peak = 0
        self.startup_s = 0.0
        self.swap_warmup = self.swap_window = swap_start
        self.cpu_start = hostcpu.CpuSample(None, None, 0.0)  # read as the window opens (_open)
        self.abort = abort
        """Ends the process on ``Unmeasurable`` (``run``'s ``abort``); None: raised into the script."""
        self.thread_env = {name: os.environ.get(name) for name in scriptenv.THREAD_VARS}
        """The thread counts' variables before the script ran (``follow_threads``)."""

    # -- the two counters ----------------------------------------------------------------------
    def on_pass(self, iterator: int, source: int, ended: bool) -> None:
        """An iterator of ``source``'s loader yielded a batch, or (``ended``) is exhausted."""
        if not ended:
            self.opened.setdefault(iterator, self.steps)
        elif (first := self.opened.pop(iterator, None)) is not None:
            self.passes.setdefault(source, [0, 0])[first != self.steps] += 1

    def on_batch(self, batch: object, expected: int | None = None, source: int = 0, fetched: int | None = None) -> None:
        """``expected``: the yielding DataLoader's batch size, where it batches (``first_dimension``);
        ``source``: its dataset's ``id``; ``fetched``: the examples it fetched for this batch, where
        known (``fetched``), counted instead of the batch's shape. A batch drawn with gradients off
        (Lightning's evaluation loop runs under ``inference_mode``) is never the training loader's."""
        samples, tokens = first_dimension(batch, expected)
        samples = samples if fetched is None else fetched
        if not torch.is_grad_enabled():
            source = -1 - source  # its own key: drawn for evaluation
        else:
            self.between.add(source)
            self.last = source
        self.drawn_at[source] = self.steps
        drawn = self.drawn.setdefault(source, [0, 0, 0])
        drawn[0] += 1
        drawn[1] += samples or 0
        drawn[2] += tokens or 0

    def counted(self, train: set[int] | None = None) -> tuple[int, int, int]:
        """(samples, tokens, other batches) of the window: the training loaders' (with gradients
        on, drawn from in more than half of the window's steps, or last before a quarter of them:
        two loaders a step, or two in turns, are both training); the batches of every other loader
        (an evaluation every N steps: drawn between two steps, never last before one) are left out."""
        train = self.training() if train is None else train
        samples = sum(d[1] for k, d in self.drawn.items() if k in train)
        tokens = sum(d[2] for k, d in self.drawn.items() if k in train)
        return samples, tokens, sum(d[0] for k, d in self.drawn.items() if k not in train)

    def training(self) -> set[int]:
        """The training loaders' datasets (``counted``). A loader never last before a step whose every
        finished pass held no step is an evaluation's, however often it runs: a tour's ``Trainer``
        with ``eval_steps`` 1, its loader iterated with gradients on, was counted (80 samples a
        step for a batch of 16)."""
        steps = max(1, self.steps - self.trial.warmup_steps)
        evaluations = {k for k, (stepless, stepped) in self.passes.items() if stepless and not stepped
                       and not self.lasts.get(k)}
        return {k for k in self.drawn if k >= 0 and k not in evaluations and (
            2 * self.present.get(k, 0) > steps or 4 * self.lasts.get(k, 0) >= steps)} or \
            {k for k in self.drawn if k >= 0}

    def on_save(self) -> None:
        if self.window_open:
            self.saved.add(len(self.marks) - 1)  # the step in progress

    def on_step(self, *_: object) -> None:
        self.steps += 1
        if self.steps == 1:
            scriptenv.follow_threads(self.thread_env)
        self.progress.step = self.steps
        if not self.window_open:
            if self.steps >= self.trial.warmup_steps:
                self._open()
            return
        for source in self.between:
            self.present[source] = self.present.get(source, 0) + 1
        if self.last is not None:
            self.lasts[self.last] = self.lasts.get(self.last, 0) + 1
        self.between.clear()
        self._mark()
        done = self.steps - self.trial.warmup_steps
        if closes(done, time.perf_counter() - self.t0, self.trial, self.times):
            try:
                self._close()
            except Unmeasurable as exc:
                if self.abort is None:
                    raise
                self.abort(exc)  # does not return: the script's own except clauses never see it

    # -- the window ----------------------------------------------------------------------------
    def _open(self) -> None:
        backend.synchronize(self.device)  # sync point: the window starts with an idle device
        self.startup_s = self.progress.mark(MK.WARMUP_DONE) - self.started
        self.swap_warmup = swap.read_swap()
        self.progress.before_window()  # the launcher's gate: nothing else imports beside the window
        self.progress.phase = "measure"
        self.swap_window = swap.read_swap()
        self.cpu_start = hostcpu.read()
        self.progress.mark(MK.WINDOW_START)
        backend.reset_peak(self.device)
        self.drawn, self.present, self.lasts, self.between = {}, {}, {}, set()
        self.window_open = True
        self.t0 = time.perf_counter()
        self._mark()

    def _mark(self) -> None:
        if self.device == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
            return
        if self.device == "mps":
            backend.synchronize(self.device)  # sync point: MPS memory is sampled after each step
            self.driver_peak = max(self.driver_peak, backend.driver_bytes(self.device) or 0)
        self.marks.append(time.perf_counter())

    def _close(self) -> None:
        backend.synchronize(self.device)  # sync point: the window ends when the device is done
        elapsed = time.perf_counter() - self.t0
        cpu_end = hostcpu.read()
        self.progress.mark(MK.WINDOW_END)
        scriptenv.check_device(self.device)
        out = self.figures(elapsed, swap.read_swap(), cpu_end)
        self.progress.after_window()  # read from the device: the next process may start beside it
        self.finish(out)

    def figures(self, elapsed: float, swap_end: swap.SwapSample, cpu_end: hostcpu.CpuSample) -> dict[str, Any]:
        """The window's figures, as ``train.figures`` gives a module's (no loss: the script keeps it)."""
        from orchestrator.harness import spread

        steps = len(self.marks) - 1
        if self.device == "cuda":
            step_ms = [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        else:
            step_ms = [(b - a) * 1000 for a, b in zip(self.marks, self.marks[1:])]
        train = self.training()
        drawn, drawn_tokens, others = self.counted(train)
        world = scriptenv.world_size()  # data parallel: each rank its own batches, rank 0's counted
        drawn, drawn_tokens = drawn * world, drawn_tokens * world
        samples = self.per_step * steps if self.per_step is not None else float(drawn)  # the spec's: the job's
        idle = self.steps - max([self.steps - steps, *(self.drawn_at[k] for k in train)])
        if samples and self.per_step is None and steps >= 4 and 2 * idle > steps:
            raise Unmeasurable(f"set samples_per_step in the spec: the script's DataLoader yielded no batch in the "
                               f"last {idle} of the window's {steps} optimizer steps, so the batches it trained on "
                               "were not counted (are they replayed, as itertools.cycle(loader) or a list of batches "
                               "replays them? the harness counts what a DataLoader's iterator yields)")
        if not samples:
            raise Unmeasurable(f"set samples_per_step in the spec: no samples counted in the window's {steps} steps "
                               "(the script drew no batch from a torch DataLoader, or its batches hold no tensor "
                               "the harness can count, such as a dataclass)")
        tokens = drawn_tokens if self.per_step is None and drawn_tokens else None
        import statistics

        result_metrics: dict[str, float | None] = {
            M.SAMPLES_PER_S: samples / elapsed,
            M.TOKENS_PER_S: tokens / elapsed if tokens else None,
            M.STEP_TIME_MS_P50: statistics.median(step_ms),
            M.STEP_TIME_MS_P90: spread.percentile(step_ms, 0.9),
            **spread.window_figures(step_ms),  # throughput_cv, throughput_ci95: as a module's trial
            M.MEASURE_S: elapsed,
            M.MEASURE_STEPS: float(steps),
            M.STARTUP_S: self.startup_s,
            M.HOST_CPU_OTHERS: hostcpu.others_busy(self.cpu_start, cpu_end),
        }
        peaks = backend.peak_stats(self.device)
        result_metrics.update(peaks)
        if self.device == "cuda":
            result_metrics[M.PEAK_MEMORY_GIB] = peaks[M.PEAK_RESERVED_GIB]
        elif self.device == "mps":
            result_metrics[M.PEAK_DRIVER_GIB] = self.driver_peak / backend.GIB
            result_metrics[M.PEAK_MEMORY_GIB] = self.driver_peak / backend.GIB
        else:
            result_metrics[M.PEAK_MEMORY_GIB] = peaks[M.PEAK_RSS_GIB]
        swapping = swap.swap_figures(self.swap_start, self.swap_warmup, self.swap_window, swap_end)
        result_metrics.update(swapping)
        info: dict[str, object] = {"samples_counted": "samples_per_step" if self.per_step is not None else "dataloader",
                                   "samples_per_step": samples / steps}
        if self.per_step is None:  # and the batches they came in (batchflag: a script that holds its step's samples)
            info["batches_per_step"] = sum(d[0] for k, d in self.drawn.items() if k in train) / steps
        if others and self.per_step is None:
            info["other_batches"] = others
        info.update(saves.figures(self.saved, step_ms))
        if world > 1 and self.per_step is None:  # counted world times (said: batchflag)
            info["world_size"] = world
        if self.per_step is not None and drawn:  # both counts: the sweep says where they differ (batchflag)
            info["dataloader_samples_per_step"] = drawn / steps
        out: dict[str, Any] = {"finite": True, "metrics": result_metrics, "device": self.device, "info": info}
        if swap.swapped(swapping) and not self.allow_swap:
            out.update(status="swapped", detail=swap.describe(swapping, result_metrics[M.SAMPLES_PER_S]))
        return out


def on_every_step(hook: Callable[..., None]) -> Any:
    """``hook`` after every optimizer step of the process (the script's, the smoke step's), and its
    handle (``remove()``). Not traced: a script's ``torch.compile(optimizer.step)`` runs the hook in
    its graph, and each step's new marks recompiled it (40 ms a step for 0.6 ms, until Dynamo's
    recompile limit)."""
    return register_optimizer_step_post_hook(torch.compiler.disable(hook))


def run(config: TrialConfig, progress: Progress, finish: Callable[[dict[str, Any]], None],
        abort: Callable[[BaseException], None] | None = None) -> dict[str, Any]:
    """Run the script of ``config`` with the meter in place. ``finish(out)`` is called at the
    window's end and must not return (it ends the process); so ``run`` returns only by raising:
    ``ScriptEnded``, or the script's own exception. ``abort(exc)``, given, ends the process on the
    harness's own finding at the window's end (``Unmeasurable``), which raised into the script
    could be caught there (a broad ``except Exception`` around its step: the trial then ran on
    until its timeout, recorded ``timeout``)."""
    from orchestrator.harness.train import apply_limits

    script = config.script
    assert script is not None
    started = progress.mark(MK.DEVICE)  # the trial's start: startup_s counts from here
    swap_start = swap.read_swap()
    params = dict(config.params)
    device = backend.resolve(params.get("device", "auto"))
    applied: dict[str, Any] = {"device": device}
    backend.init_device(device)
    progress.mark(MK.DEVICE_READY)
    apply_limits(params, device, applied)
    progress.mark(MK.LIMITS_APPLIED)
    progress.phase = "script"

    def done(out: dict[str, Any]) -> None:
        out.update(applied=applied, not_applied=dict(config.not_applied))
        finish(out)

    meter = Meter(config, device, progress, started, done, swap_start, abort)
    handle = on_every_step(meter.on_step)
    undo, undo_saves = counting_batches(meter), saves.counting_saves(meter.on_save)
    undo_spawn = scriptenv.refusing_spawn(lambda: meter.steps)
    try:
        code = run_script(script)
    finally:
        handle.remove()
        undo()
        undo_saves()
        undo_spawn()
    t = config.trial
    raise ScriptEnded(code, meter.steps, meter.counted()[0],
                      f"{t.warmup_steps} warm-up + {t.measure_steps} measured steps and {t.min_measure_s:g} s")


def run_script(script: ScriptCall) -> Any:
    """``python SCRIPT ARGV...`` in this process: ``__main__``, ``sys.argv`` as given, its folder
    first on ``sys.path``, the working directory unchanged. Returns its exit code (None when it
    returned without ``sys.exit``)."""
    sys.argv = [script.path, *script.argv]
    sys.path.insert(0, os.path.dirname(script.path))
    try:
        runpy.run_path(script.path, run_name="__main__")
    except SystemExit as exc:
        return exc.code
    return None
