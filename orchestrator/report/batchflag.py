"""What a script sweep's DataLoader counts show, each said once, as soon as it shows: a swept batch
size that does not reach the script, an evaluation loop inside the timed windows, and a
``samples_per_step`` the DataLoader's own count contradicts; also checkpoints saved inside the
windows (``result.info["saves"]``, ``harness/saves.py``), whose time counts as training, and a
script that trained in several processes (``result.info["world_size"]``: rank 0's count scaled); and a
searched knob a trial could not apply (``result.not_applied``: checkpointing where the experiment
lists no blocks), for a module's sweep too.

A script takes its parameters through its flags (``args``); one that ignores the batch-size flag
(a hard-coded ``batch_size=16`` in its DataLoader) trains the same batch in every trial, and the
sweep ranks noise. The harness counts what the script's DataLoaders yield per optimizer step
(``result.info["samples_per_step"]``): two trials of different ``batch_size``, every other
parameter equal, with the same count are that case (with another parameter different, the same
count is often the point: 8 x 4 micro-batches against 32 x 1, the effective batch held). Not per
trial: a script may take ``batch_size`` as a per-device or a global batch and step over several
micro-batches, so one trial's count need not equal its ``batch_size``, but two different batches
must not draw the same samples.

The harness counts only the training loader's batches; those of another loader drawn inside the
window (``result.info["other_batches"]``: an evaluation loop) are left out of the samples, but
their time is in the window.
"""

from __future__ import annotations

from typing import Any

from orchestrator import metrics as M
from orchestrator.outcome import Outcome, Status

SAME = 0.01
"""Counts closer than this (relative) are the same batch."""


class BatchFlag:
    def __init__(self, script: bool, searched: dict[str, Any]) -> None:
        self.active = script and "batch_size" in searched
        self.evaluation = script
        """The evaluation-inside-the-window line is still to say."""
        self.saving = script
        """The checkpoints-inside-the-window line is still to say."""
        self.ranks = script
        """The line on a script that trained in several processes (``info["world_size"]``) is still to say."""
        self.given = script
        """The line on a ``samples_per_step`` the DataLoader's count contradicts is still to say."""
        self.searched = set(searched)
        self.unapplied: set[str] = set()
        """Searched knobs a trial said it could not apply (its result's ``not_applied``), said once each."""
        self.seen: dict[tuple, dict[Any, tuple[float, int, float | None]]] = {}
        """The other parameters' values -> batch_size -> (samples per optimizer step, trial number,
        batches per step where counted), the first ok trial of each."""

    def line(self, number: int, params: dict[str, Any], outcome: Outcome) -> str | None:
        """The lines to say after trial ``number``'s result (each once), else None."""
        info = (outcome.result.info if outcome.result is not None else None) or {}
        said = [self._batch_line(number, params, outcome, info)]
        if self.evaluation and outcome.status == Status.OK and info.get("other_batches"):
            self.evaluation = False
            said.append(f"orchestrate: trial #{number} drew {info['other_batches']} batches from another DataLoader "
                        "inside its timed window (an evaluation loop?): their samples are not counted, their time "
                        "is; set the script's evaluation interval beyond the window to measure training alone")
        if self.saving and outcome.status == Status.OK and info.get("saves"):
            self.saving = False
            metrics = (outcome.result.metrics if outcome.result is not None else None) or {}
            steps, window = metrics.get(M.MEASURE_STEPS), metrics.get(M.MEASURE_S)
            of = f" of its window's {steps:.0f}" if isinstance(steps, (int, float)) else ""
            spent = f" of its {window:.2f}-s window" if isinstance(window, (int, float)) else ""
            took = f", which took {info['save_s']:.2f} s{spent} beyond its median step" \
                if isinstance(info.get("save_s"), (int, float)) else ""  # every step saved: none to set against
            said.append(f"orchestrate: trial #{number} saved checkpoints in {info['saves']:.0f}{of} steps{took}: their "
                        "time counts as training; set the script's save interval beyond the window to measure "
                        "training alone")
        if self.ranks and outcome.status == Status.OK and (world := info.get("world_size")):
            self.ranks = False
            said.append(f"orchestrate: trial #{number} trained in {world} processes (torch.distributed, world size "
                        f"{world}): the harness saw this process's batches, and counted them {world} times, as data "
                        "parallelism (DDP, FSDP) gives each rank its own; its peak memory is this process's alone")
        for name, why in ((outcome.result.not_applied if outcome.result is not None else None) or {}).items():
            if name in self.searched and name not in self.unapplied:  # an experiment tour: checkpointing without
                self.unapplied.add(name)  # blocks was a no-op that only result.json said
                said.append(f"orchestrate: trial #{number} could not apply {name} ({why}): the configurations "
                            f"that differ only in {name} measure the same training")
        loader, given = info.get("dataloader_samples_per_step"), info.get("samples_per_step")
        if self.given and outcome.status == Status.OK and isinstance(loader, (int, float)) \
                and isinstance(given, (int, float)) and abs(loader - given) > SAME * given:
            self.given = False
            said.append(f"orchestrate: trial #{number} counted {given:,.4g} samples a step (samples_per_step), but "
                        f"the script's DataLoader yielded {loader:,.4g} a step: samples_per_s uses the spec's "
                        "figure; remove samples_per_step to count the DataLoader's batches")
        return "\n".join(line for line in said if line) or None

    def after(self, trials: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> str | None:
        """The batch line of trials already run (number, parameters, ``result.info``; ok ones), for
        the summary, ``report`` and ``best``: the live line was said once, and the winner it puts in
        doubt was then shown without it (a script tour)."""
        for number, params, info in sorted(trials, key=lambda t: t[0]):
            if (said := self._batch_line(number, params, Outcome(Status.OK), info)) is not None:
                return said
        return None

    def _batch_line(self, number: int, params: dict[str, Any], outcome: Outcome, info: dict[str, Any]) -> str | None:
        per_step, batch = info.get("samples_per_step"), params.get("batch_size")
        if not self.active or outcome.status != Status.OK or info.get("samples_counted") != "dataloader" \
                or not isinstance(per_step, (int, float)) or per_step <= 0 or batch is None:
            return None
        seen = self.seen.setdefault(tuple(sorted((k, str(v)) for k, v in params.items() if k != "batch_size")), {})
        batches = info.get("batches_per_step")
        for other, (counted, first, drawn) in seen.items():
            if drawn is not None and isinstance(batches, (int, float)) and abs(drawn - batches) > SAME * batches:
                continue  # the same samples in batches of another size: the script holds its step's samples
            if other != batch and abs(counted - per_step) <= SAME * per_step:  # (a review: accumulation it works out)
                self.active = False
                return (f"orchestrate: trials #{first} (batch_size={other}) and #{number} (batch_size={batch}) "
                        f"both drew {per_step:,.4g} samples per optimizer step from the script's DataLoader: the "
                        "swept batch size does not reach the script (is its flag in args, and does the script "
                        "use it?), so their throughputs measure the same batch")
        seen.setdefault(batch, (float(per_step), number, batches if isinstance(batches, (int, float)) else None))
        return None
