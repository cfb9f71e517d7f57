"""Every bad spec or flag gets one stderr line (file:line: field: rule, got value), exit 2, no
traceback, and nothing on disk: no mlruns/, no database.

The table runs ``orchestrator.cli.main`` in-process without ``--dry-run``, so a case the
validator let through would start a real run and leave mlruns/ behind. A few cases also go
through the installed ``orchestrate`` command, as a user would run it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import orchestrate
from orchestrator.cli import main

HEAD = "name: t\nexperiment: experiments.faults\ndevice: cpu\n"  # lines 1-3; what follows is line 4


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    """The spec file's content."""
    expect: tuple[str, ...]
    """Substrings of the message: the field path, the rule and the value received."""
    line: int | None
    """The line the message must start with (``SPEC:LINE:``); None when no line applies."""
    args: tuple[str, ...] = ()
    """Extra command-line flags."""
    files: dict[str, str] = field(default_factory=dict)
    """Other files to write next to the spec (an experiment module, say)."""
    prefix: str | None = None
    """What the message starts with instead of ``SPEC:LINE:`` (a flag, or ``orchestrate:``)."""

    def __str__(self) -> str:
        return self.id


CASES = [
    # -- the file itself ---------------------------------------------------------------------------
    Case("not-yaml", "name: [unclosed\nexperiment: x\n",
         ("not valid YAML", "expected ',' or ']'", "flow sequence that starts on line 1"), 2),
    Case("tab-indent", "name: t\n\texperiment: x\n", ("not valid YAML", "tab", "indent with spaces"), 2),
    Case("two-documents", "name: t\n---\nname: u\n", ("not valid YAML", "single document", "another document"), 2),
    Case("empty-file", "", ("the file is empty", "name:", "experiment:"), 1),
    Case("only-comments", "# name: t\n", ("the file is empty",), 1),
    Case("top-is-a-list", "- name: t\n- experiment: x\n", ("top level must be a mapping", "got a list"), 1),
    Case("top-is-a-scalar", "just words\n", ("top level must be a mapping", "got 'just words'"), 1),
    Case("duplicate-top-key", "name: t\nexperiment: experiments.faults\nname: u\n",
         ("name: ", "duplicate key 'name'", "first given on line 1"), 3),
    Case("duplicate-nested-key", HEAD + "space:\n  batch_size: [8]\n  batch_size: [16]\n",
         ("space.batch_size: ", "duplicate key 'batch_size'", "first given on line 5"), 6),
    Case("merge-key", HEAD + "base: &b {batch_size: 8}\nfixed:\n  <<: *b\n",
         ("fixed: ", "merge keys (<<) are not supported"), 6),
    Case("unknown-tag", HEAD + "fixed:\n  hidden_size: !big 8\n",
         ("not valid YAML", "constructor for the tag '!big'"), 5),
    Case("impossible-date", HEAD + "fixed:\n  start: 2024-13-45\n", ("not valid YAML", "month", "2024-13-45"), 5),
    Case("number-as-key", HEAD + "fixed:\n  1: 8\n", ("fixed: ", "keys must be names", "got 1"), 5),
    Case("null-as-key", HEAD + "fixed:\n  ~: 8\n", ("fixed: ", "keys must be names", "got null"), 5),
    # -- required and unknown keys -------------------------------------------------------------------
    Case("missing-name", "experiment: experiments.faults\n", ("missing required key name",), 1),
    Case("missing-experiment", "name: t\ndevice: cpu\n", ("missing required key experiment",), 1),
    Case("unknown-top-key", HEAD + "serach:\n  sampler: tpe\n",
         ("serach: ", "unknown key", "did you mean 'search'?", "valid keys are name, experiment"), 4),
    Case("unknown-search-key", HEAD + "search:\n  n_trails: 4\n",
         ("search.n_trails: ", "unknown key", "did you mean 'n_trials'?"), 5),
    Case("unknown-trial-key", HEAD + "trial:\n  warmup: 2\n",
         ("trial.warmup: ", "unknown key", "did you mean 'warmup_steps'?"), 5),
    Case("unknown-range-key", HEAD + "space:\n  lr: {low: 0.001, hihg: 0.1}\n",
         ("space.lr.hihg: ", "unknown key", "did you mean 'high'?"), 5),
    Case("unknown-constraint-metric", HEAD + "objective:\n  constraints:\n    peak_mem_gib: {max: 2}\n",
         ("objective.constraints.peak_mem_gib: ", "unknown key", "did you mean 'peak_memory_gib'?"), 6),
    # -- wrong types ------------------------------------------------------------------------------
    Case("n_trials-quoted", HEAD + 'search:\n  n_trials: "40"\n',
         ("search.n_trials: ", "n_trials must be a positive integer", "got '40' (text, not a number"), 5),
    Case("n_trials-boolean", HEAD + "search:\n  n_trials: true\n",
         ("search.n_trials: ", "n_trials must be a positive integer", "got true"), 5),
    Case("n_trials-exponent", HEAD + "search:\n  n_trials: 1e3\n",
         ("search.n_trials: ", "must be a positive integer", "got '1e3' (text, not a number"), 5),
    Case("timeout-yes", HEAD + "trial:\n  timeout_s: yes\n",
         ("trial.timeout_s: ", "timeout_s must be a positive number", "got yes (YAML reads it as true)"), 5),
    Case("batch-size-boolean-item", HEAD + "space:\n  batch_size: [8, true]\n",
         ("space.batch_size[1]: ", "batch sizes must be positive integers", "got true"), 5),
    Case("batch-size-float", HEAD + "fixed:\n  batch_size: 8.5\n",
         ("fixed.batch_size: ", "batch sizes must be positive integers", "got 8.5"), 5),
    Case("section-not-mapping", HEAD + "trial: 30\n", ("trial: ", "must be a mapping", "got 30"), 4),
    Case("fixed-is-a-list", HEAD + "fixed: [8]\n", ("fixed: ", "must be a mapping", "got a list"), 4),
    Case("fixed-list-value", HEAD + "fixed:\n  hidden_size: [8, 16]\n",
         ("fixed.hidden_size: ", "a fixed value is one value; to try several, list hidden_size under space",
          "got a list"), 5),
    Case("fixed-empty-value", HEAD + "fixed:\n  hidden_size:\n",
         ("fixed.hidden_size: ", "a string, number or boolean", "got nothing (an empty value)"), 5),
    Case("space-single-value", HEAD + "space:\n  hidden_size: 8\n",
         ("space.hidden_size: ", "a list of choices or a range", "single value belongs in fixed", "got 8"), 5),
    Case("activation-checkpointing-int", HEAD + "fixed:\n  activation_checkpointing: 1\n",
         ("fixed.activation_checkpointing: ", "must be true or false", "got 1"), 5),
    Case("name-with-space", "name: my sweep\nexperiment: experiments.faults\n",
         ("name: ", "letters, digits", "got 'my sweep'"), 1),
    Case("experiment-is-a-path", "name: t\nexperiment: experiments/faults.py\n",
         ("experiment: ", "dotted Python module name", "got 'experiments/faults.py'"), 2),
    # -- choices and ranges -------------------------------------------------------------------------
    Case("empty-choices", HEAD + "space:\n  batch_size: []\n",
         ("space.batch_size: ", "a list of choices must not be empty"), 5),
    Case("repeated-choice", HEAD + "space:\n  hidden_size: [16, 32, 16]\n",
         ("space.hidden_size[2]: ", "choices must not repeat", "got 16"), 5),
    Case("quoted-number-among-numbers", HEAD + "space:\n  hidden_size: [32, '64']\n",
         ("space.hidden_size[1]: ", "a quoted number among numbers reaches the trial as a string",
          "got '64' (text, not a number: remove the quotes)"), 5),
    Case("repeated-choice-int-float", HEAD + "space:\n  lr: [1, 1.0]\n",
         ("space.lr[1]: ", "choices must not repeat", "got 1.0"), 5),
    Case("range-low-above-high", HEAD + "space:\n  lr: {low: 0.1, high: 0.01}\nsearch:\n  n_trials: 4\n",
         ("space.lr: ", "low must not exceed high", "inclusive", "low 0.1 > high 0.01"), 5),
    Case("range-log-low-zero", HEAD + "space:\n  hidden_size:\n    low: 0\n    high: 64\n    log: true\nsearch:\n  n_trials: 4\n",
         ("space.hidden_size.low: ", "log: true needs low > 0", "got 0"), 6),
    # an experiment's own parameter (experiments.hf declares no PARAMS: any name may be its config's)
    Case("range-log-negative", HEAD.replace("experiments.faults", "experiments.hf") +
         "space:\n  scale: {low: -1.0, high: 1.0, log: true}\nsearch:\n  n_trials: 4\n",
         ("space.scale.low: ", "log: true needs low > 0", "got -1.0"), 5),
    Case("range-missing-high", HEAD + "space:\n  lr: {low: 0.001}\n",
         ("space.lr: ", "missing required key space.lr.high"), 5),
    Case("range-bound-text", HEAD + "space:\n  lr: {low: small, high: 0.1}\n",
         ("space.lr.low: ", "range bounds must be numbers", "got 'small'"), 5),
    Case("range-int-knob-float-bound", HEAD + "space:\n  batch_size: {low: 8, high: 64.5}\n",
         ("space.batch_size.high: ", "batch_size ranges need integer bounds", "got 64.5"), 5),
    Case("range-on-a-choice-knob", HEAD + "space:\n  dtype: {low: 1, high: 2}\n",
         ("space.dtype: ", "dtype takes a list of choices, not a range"), 5),
    Case("range-step-misses-high", HEAD + "space:\n  hidden_size: {low: 8, high: 64, step: 10}\n",
         ("space.hidden_size.step: ", "multiple of step", "both bounds are visited", "got 10"), 5),
    Case("range-step-and-log", HEAD + "space:\n  lr: {low: 0.001, high: 0.1, step: 0.001, log: true}\n",
         ("space.lr.step: ", "step and log: true cannot be combined", "got 0.001"), 5),
    Case("grid-over-range-without-step", HEAD + "space:\n  hidden_size: {low: 8, high: 64}\nsearch:\n  sampler: grid\n",
         ("space.hidden_size: ", "grid sampling over a range needs a step"), 5),
    Case("continuous-without-n_trials", HEAD + "space:\n  lr: {low: 0.001, high: 0.1}\n",
         ("space.lr: ", "a range without a step is continuous", "set search.n_trials"), 5),
    # -- counts, steps and timeouts that must be positive -------------------------------------------
    Case("batch-size-negative", HEAD + "space:\n  batch_size: [8, 16, -8]\n",
         ("space.batch_size[2]: ", "batch sizes must be positive integers", "got -8"), 5),
    Case("batch-size-zero", HEAD + "fixed:\n  batch_size: 0\n",
         ("fixed.batch_size: ", "batch sizes must be positive integers", "got 0"), 5),
    Case("grad-accum-zero", HEAD + "space:\n  grad_accum_steps: [1, 0]\n",
         ("space.grad_accum_steps[1]: ", "gradient accumulation steps must be positive integers", "got 0"), 5),
    Case("seq-len-negative", HEAD + "fixed:\n  seq_len: -128\n",
         ("fixed.seq_len: ", "sequence lengths must be positive integers", "got -128"), 5),
    Case("warmup-steps-zero", HEAD + "trial:\n  warmup_steps: 0\n",
         ("trial.warmup_steps: ", "warmup_steps must be a positive integer", "got 0"), 5),
    Case("measure-steps-negative", HEAD + "trial:\n  measure_steps: -5\n",
         ("trial.measure_steps: ", "measure_steps must be a positive integer", "got -5"), 5),
    Case("repeats-zero", HEAD + "trial:\n  repeats: 0\n",
         ("trial.repeats: ", "repeats must be a positive integer", "got 0"), 5),
    Case("repeats-too-many", HEAD + "trial:\n  repeats: 50\n",
         ("trial.repeats: ", "repeats must be at most 20", "got 50"), 5),
    Case("repeats-float", HEAD + "trial:\n  repeats: 2.5\n",
         ("trial.repeats: ", "repeats must be a positive integer", "got 2.5"), 5),
    Case("timeout-zero", HEAD + "trial:\n  timeout_s: 0\n",
         ("trial.timeout_s: ", "timeout_s must be a positive number", "got 0"), 5),
    Case("timeout-min-negative", HEAD + "search:\n  timeout_min: -10\n",
         ("search.timeout_min: ", "timeout_min must be a positive number", "got -10"), 5),
    Case("n_trials-zero", HEAD + "search:\n  n_trials: 0\n",
         ("search.n_trials: ", "n_trials must be a positive integer", "got 0"), 5),
    Case("n_trials-negative", HEAD + "search:\n  n_trials: -3\n",
         ("search.n_trials: ", "n_trials must be a positive integer", "got -3"), 5),
    Case("max-failures-negative", HEAD + "search:\n  max_failures: -1\n",
         ("search.max_failures: ", "max_failures must be an integer >= 0", "got -1"), 5),
    # -- names from a fixed list --------------------------------------------------------------------
    Case("unknown-dtype", HEAD + "space:\n  dtype: [float32, fp16]\n",
         ("space.dtype[1]: ", "dtype must be one of float32, float16, bfloat16", "got 'fp16'"), 5),
    Case("unknown-device", "name: t\nexperiment: experiments.faults\ndevice: gpu\n",
         ("device: ", "device must be one of auto, mps, cuda, cpu", "got 'gpu'"), 3),
    Case("unknown-swept-device", "name: t\nexperiment: experiments.faults\nspace:\n  device: [cpu, tpu]\n",
         ("space.device[1]: ", "device must be one of mps, cuda, cpu", "got 'tpu'"), 4),
    Case("swept-device-auto", "name: t\nexperiment: experiments.faults\nspace:\n  device: [auto, cpu]\n",
         ("space.device[0]: ", "a swept device must be mps, cuda or cpu", "got 'auto'"), 4),
    Case("device-in-fixed", HEAD + "fixed:\n  device: cpu\n", ("fixed.device: ", "top-level `device:`"), 5),
    Case("device-top-and-swept", HEAD + "space:\n  device: [cpu]\n",
         ("device: ", "device is swept in space", "remove the top-level device key"), 3),
    Case("unknown-sampler", HEAD + "search:\n  sampler: bayes\n",
         ("search.sampler: ", "sampler must be one of auto, grid, random, tpe, nsga2", "got 'bayes'"), 5),
    Case("unknown-direction", HEAD + "objective:\n  metric: samples_per_s\n  direction: up\n",
         ("objective.direction: ", "direction must be one of maximize, minimize", "got 'up'"), 6),
    Case("unknown-objective-metric", HEAD + "objective:\n  metric: throughput\n",
         ("objective.metric: ", "objective metric must be one of samples_per_s", "got 'throughput'"), 5),
    Case("unknown-direction-multi", HEAD + "objective:\n  metrics:\n    samples_per_s: maximize\n    peak_memory_gib: lower\n",
         ("objective.metrics.peak_memory_gib: ", "direction must be one of maximize, minimize", "got 'lower'"), 7),
    Case("metric-and-metrics", HEAD + "objective:\n  metric: loss\n  metrics: {samples_per_s: maximize}\n",
         ("objective: ", "either metric + direction or metrics, not both"), 4),
    Case("constraint-max-and-min", HEAD + "objective:\n  constraints:\n    peak_memory_gib: {max: 8, min: 1}\n",
         ("objective.constraints.peak_memory_gib: ", "exactly one of max or min"), 6),
    Case("constraint-bound-text", HEAD + "objective:\n  constraints:\n    peak_memory_gib: {max: lots}\n",
         ("objective.constraints.peak_memory_gib.max: ", "the max bound must be a number", "got 'lots'"), 6),
    # -- memory knobs --------------------------------------------------------------------------
    Case("high-watermark-above-2", HEAD + "fixed:\n  mps_high_watermark_ratio: 2.5\n",
         ("fixed.mps_high_watermark_ratio: ", "watermark ratios must be numbers from 0.0 to 2.0", "got 2.5"), 5),
    Case("low-watermark-negative", HEAD + "space:\n  mps_low_watermark_ratio: [0.5, -0.1]\n",
         ("space.mps_low_watermark_ratio[1]: ", "watermark ratios must be numbers from 0.0 to 2.0", "got -0.1"), 5),
    Case("low-watermark-above-high", HEAD + "fixed:\n  mps_high_watermark_ratio: 1.0\n  mps_low_watermark_ratio: 1.5\n",
         ("fixed.mps_low_watermark_ratio: ", "the low watermark must not exceed the high one (1.0)", "got 1.5"), 6),
    Case("low-watermark-above-swept-high", HEAD + "space:\n  mps_high_watermark_ratio: [1.7, 1.2]\n  mps_low_watermark_ratio: [1.0, 1.4]\n",
         ("space.mps_low_watermark_ratio[1]: ", "must not exceed the high one (1.2)", "got 1.4"), 6),
    Case("low-watermark-above-default-high", HEAD + "fixed:\n  mps_low_watermark_ratio: 1.9\n",
         ("fixed.mps_low_watermark_ratio: ", "default high one, 1.7", "got 1.9"), 5),
    Case("memory-fraction-zero", HEAD + "fixed:\n  memory_fraction: 0\n",
         ("fixed.memory_fraction: ", "memory_fraction must be a number in (0, 2]", "got 0"), 5),
    Case("memory-fraction-above-2", HEAD + "space:\n  memory_fraction: [0.5, 3]\n",
         ("space.memory_fraction[1]: ", "memory_fraction must be a number in (0, 2]", "got 3"), 5),
    # -- parameters that depend on each other ----------------------------------------------------
    Case("fixed-and-swept", HEAD + "fixed:\n  batch_size: 8\nspace:\n  batch_size: [8, 16]\n",
         ("space.batch_size: ", "batch_size is also in fixed (line 5)", "either fixed or swept"), 7),
    Case("effective-batch-not-divisible", HEAD + "fixed:\n  effective_batch_size: 64\nspace:\n  batch_size: [8, 24]\n",
         ("space.batch_size[1]: ", "each batch size must divide effective_batch_size 64", "got 24"), 7),
    Case("effective-batch-with-grad-accum", HEAD + "fixed:\n  effective_batch_size: 64\nspace:\n  batch_size: [8, 16]\n  grad_accum_steps: [1, 2]\n",
         ("space.grad_accum_steps: ", "derived from effective_batch_size / batch_size", "not both"), 8),
    Case("effective-batch-without-batch-size", HEAD + "fixed:\n  effective_batch_size: 64\n",
         ("fixed.effective_batch_size: ", "needs batch_size"), 5),
    # -- storage and tracking URLs ---------------------------------------------------------------
    Case("storage-not-a-url", HEAD + 'storage: "notaurl"\n',
         ("storage: ", "storage must be a database URL such as sqlite:///mlruns/optuna.db", "got 'notaurl'"), 4),
    Case("storage-in-memory", HEAD + "storage: 'sqlite://'\n",
         ("storage: ", "needs a file path", "in-memory", "got 'sqlite://'"), 4),
    Case("storage-sqlite-memory", HEAD + "storage: 'sqlite:///:memory:'\n",
         ("storage: ", "needs a file path", "in-memory", "got 'sqlite:///:memory:'"), 4),
    Case("tracking-sqlite-no-path", HEAD + "tracking_uri: 'sqlite:///'\n",
         ("tracking_uri: ", "needs a file path", "got 'sqlite:///'"), 4),
    Case("storage-http", HEAD + "storage: http://localhost:5000\n",
         ("storage: ", "sqlite:///, postgresql:// or mysql://", "got 'http://localhost:5000'"), 4),
    Case("storage-unknown-driver", HEAD + "storage: postgresql+nosuch://u@h/db\n",
         ("storage: ", "database driver SQLAlchemy does not know (nosuch)", "got 'postgresql+nosuch://u@h/db'"), 4),
    Case("tracking-plain-folder", HEAD + "tracking_uri: ./mlruns\n",
         ("tracking_uri: ", "MLflow 3 refuses a plain folder", "got './mlruns'"), 4),
    Case("tracking-file-store", HEAD + "tracking_uri: file:///tmp/mlruns\n",
         ("tracking_uri: ", "MLflow 3 refuses the file store", "got 'file:///tmp/mlruns'"), 4),
    # -- found by the real run: the folder check and the experiment probe (a subprocess) -----------
    Case("storage-folder-missing", HEAD + "storage: 'sqlite:///does/not/exist/x.db'\n",
         ("storage: ", "does/not/exist does not exist", "got 'sqlite:///does/not/exist/x.db'"), 4),
    Case("tracking-folder-missing", HEAD + "tracking_uri: 'sqlite:///nowhere/mlflow.db'\n",
         ("tracking_uri: ", "nowhere does not exist", "got 'sqlite:///nowhere/mlflow.db'"), 4),
    Case("storage-through-a-file", HEAD + "storage: 'sqlite:///typo.yaml/optuna.db'\n",
         ("storage: ", "typo.yaml is a file, not a folder; fix the URL", "got 'sqlite:///typo.yaml/optuna.db'"), 4,
         files={"typo.yaml": "name: t\n"}),
    Case("experiment-missing", "name: t\nexperiment: experiments.nosuch\ndevice: cpu\n",
         ("experiment: ", "no module named 'experiments.nosuch'"), 2),
    Case("experiment-without-build", "name: t\nexperiment: badexp\ndevice: cpu\n",
         ("experiment: ", "badexp does not follow the experiment contract", "no build(params, device)"), 2,
         files={"badexp.py": "PARAMS = {'width': 8}\n"}),
    Case("experiment-import-fails", "name: t\nexperiment: brokenexp\ndevice: cpu\n",
         ("experiment: ", "importing brokenexp failed", "No module named 'not_installed_anywhere'"), 2,
         files={"brokenexp.py": "import not_installed_anywhere\ndef build(params, device): ...\n"}),
    # an experiment tour: where in the module, and what PARAMS was, were not said
    Case("experiment-without-build-dry-run", "name: t\nexperiment: nobuild\ndevice: cpu\n",  # read from its source
         ("experiment: ", "nobuild does not follow the experiment contract", "no build(params, device)"), 2,
         files={"nobuild.py": "PARAMS = {'width': 8}\ndef build_workload(params, device): ...\n"}, args=("--dry-run",)),
    Case("experiment-as-a-path", "name: t\nexperiment: mine/exp.py\ndevice: cpu\n",
         ("experiment: ", "dotted Python module name", "(did you mean mine.exp?)", "got 'mine/exp.py'"), 2),
    Case("experiment-dotted-file-name", "name: t\nexperiment: dotexp.py\ndevice: cpu\n",
         ("experiment: ", "no module named 'dotexp.py': dotexp (", "is a module, not a package (did you mean dotexp?)"), 2,
         files={"dotexp.py": "def build(params, device): ...\n"}),
    Case("experiment-import-name-error", "name: t\nexperiment: nameerr\ndevice: cpu\n",
         ("experiment: ", "importing nameerr failed: NameError: name 'Dict' is not defined", "at nameerr.py:2"), 2,
         files={"nameerr.py": "PARAMS = {'k': 1}\nX: Dict = {}\ndef build(params, device): ...\n"}),
    Case("experiment-validate-bug", "name: t\nexperiment: valbug\ndevice: cpu\n",
         ("experiment: ", "valbug.validate_params raised KeyError: 'missing_key'", "at valbug.py:3"), 2,
         files={"valbug.py": "PARAMS = {'k': 1}\ndef validate_params(params):\n    return params['missing_key']\n"
                             "def build(params, device): ...\n"}),
    Case("experiment-params-a-list", "name: t\nexperiment: lstexp\ndevice: cpu\n",
         ("experiment: ", "lstexp.PARAMS must be a dict of parameter names to defaults, got a list"), 2,
         files={"lstexp.py": "PARAMS = ['k']\ndef build(params, device): ...\n"}),
    Case("experiment-unknown-parameter", HEAD + "fixed:\n  hidden_sise: 8\n",
         ("fixed.hidden_sise: ", "unknown parameter for experiments.faults", "did you mean 'hidden_size'?"), 5),
    # -- flags --------------------------------------------------------------------------------------
    Case("flag-n-trials-zero", HEAD, ("search.n_trials: ", "n_trials must be a positive integer", "got 0"), None,
         args=("--n-trials", "0"), prefix="--n-trials: "),
    Case("flag-device-gpu", HEAD, ("device: ", "device must be one of auto, mps, cuda, cpu", "got 'gpu'"), None,
         args=("--device", "gpu"), prefix="--device: "),
    Case("flag-device-when-swept", "name: t\nexperiment: experiments.faults\nspace:\n  device: [cpu]\n",
         ("cannot override the device", "space.device sweeps it (line 4)", "got 'cpu'"), None,
         args=("--device", "cpu"), prefix="--device: "),
    Case("flag-storage", HEAD, ("storage: ", "must be a database URL", "got 'notaurl'"), None,
         args=("--storage", "notaurl"), prefix="--storage: "),
    Case("flag-tracking-uri", HEAD, ("tracking_uri: ", "refuses a plain folder", "got 'mlruns'"), None,
         args=("--tracking-uri", "mlruns"), prefix="--tracking-uri: "),
    Case("flag-tracking-uri-through-a-file", HEAD, ("tracking_uri: ", "typo.yaml is a file, not a folder; fix the URL",
                                                    "got 'sqlite:///typo.yaml/runs/mlflow.db'"), None,
         args=("--tracking-uri", "sqlite:///typo.yaml/runs/mlflow.db"), files={"typo.yaml": "name: t\n"},
         prefix="--tracking-uri: "),
]


DEVICE_CASES = [  # the probe's answer, on the flag when the flag gave the device, in doctor's words
    Case("flag-device-cuda-unbuilt", HEAD, ("device: ", "cuda cannot be used: this torch build has no CUDA support"),
         None, args=("--device", "cuda"), prefix="--device: "),
    Case("flag-device-mps-unbuilt", HEAD, ("device: ", "mps cannot be used: this torch build has no MPS support"),
         None, args=("--device", "mps"), prefix="--device: "),
    Case("device-cuda-unbuilt", HEAD.replace("device: cpu", "device: cuda"),
         ("device: ", "cuda cannot be used: this torch build has no CUDA support"), 3),
]


def run_cli(args: list[str]) -> int:
    """``main`` as the console script runs it: argparse's own errors exit through SystemExit."""
    try:
        return main(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def check_one_line(err: str, case: Case, spec: Path) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{err}"
    message = lines[0]
    assert "Traceback" not in message
    if case.line is not None:
        assert message.startswith(f"{spec}:{case.line}: "), message
    if case.prefix is not None:
        assert message.startswith(case.prefix), message
    for part in case.expect:
        assert part in message, f"{part!r} not in {message!r}"
    return message


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input_gets_one_line_exit_2_and_creates_nothing(
        case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    refused(case, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("case", DEVICE_CASES, ids=str)
def test_a_device_this_torch_lacks_is_said_plainly(
        case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tour's ``--device cuda`` blamed on the spec's ``device: auto`` line, with torch's
    ``AssertionError``: the flag is named, and the reason is doctor's."""
    import torch

    built = {"cuda": torch.version.cuda is not None, "mps": torch.backends.mps.is_built()}
    device = "mps" if "mps" in case.id else "cuda"
    if built[device]:
        pytest.skip(f"this torch build has {device}")
    refused(case, tmp_path, monkeypatch, capsys)


def refused(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``case`` run in ``tmp_path``: one line, exit 2, nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the probe imports modules from tmp_path
    spec = tmp_path / "spec.yaml"
    spec.write_text(case.text)
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)

    code = run_cli([str(spec), *case.args])

    out, err = capsys.readouterr()
    assert code == 2, err
    check_one_line(err, case, spec)
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["spec.yaml", *case.files])


def test_unreachable_database_is_one_line_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the driver the spec is refused at load time, naming the package to install; with
    it, the real run's connection check refuses the URL. Either way: one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    url = "postgresql://nobody@nosuchhost.invalid:1/x"  # a name that resolves nowhere: refused, not waited for
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD + f"storage: '{url}'\n")
    from sqlalchemy.engine import make_url

    driver = make_url(url).get_dialect().driver
    if importlib.util.find_spec(driver) is None:
        # the postgres extra installs psycopg2, which a URL without a driver may not mean (SQLAlchemy 2.1: psycopg)
        other = ("name the driver installed, as postgresql+psycopg2://",) if importlib.util.find_spec("psycopg2") else ()
        case = Case("pg", "", ("storage: ", f"needs the postgresql driver {driver}, which is not installed",
                                "pip install", *other, f"got '{url}'"), 4)
    else:
        case = Case("pg", "", (f"storage {url}: cannot connect",), None, prefix="orchestrate: ")

    code = run_cli([str(spec)])

    out, err = capsys.readouterr()
    assert code == 2
    check_one_line(err, case, spec)
    assert out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["spec.yaml"]


def test_a_flag_argparse_refuses_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD)
    assert run_cli([str(spec), "--n-trials", "many"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--n-trials" in err and "'many'" in err, err


def test_a_misspelled_command_is_named_and_a_spec_path_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tour's ``orchestrate reprot SPEC``, which read as a spec named ``reprot`` with a stray
    argument; a spec's path (missing, or near a command's name but existing) is read as before."""
    monkeypatch.chdir(tmp_path)
    for args, said in ((["reprot", "spec.yaml"], "orchestrate: unknown command 'reprot'; did you mean 'report'?"),
                       (["reprot"], "orchestrate: unknown command 'reprot'; did you mean 'report'?"),
                       (["chekc", "--repair"], "orchestrate: unknown command 'chekc'; did you mean 'check'?"),
                       (["best.yaml"], "best.yaml: no such file"),
                       (["sweeps/bset"], "sweeps/bset: no such file"),
                       (["nosuch"], "nosuch: no such file")):
        assert run_cli(args) == 2, args
        assert capsys.readouterr().err == said + "\n"
    (tmp_path / "reprot").write_text(HEAD)  # a spec that exists is a spec, whatever its name
    assert run_cli(["reprot", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("Plan for reprot (dry run")


ENTRY_POINT_CASES = [c for c in CASES if c.id in (
    "unknown-top-key", "timeout-yes", "merge-key", "experiment-without-build", "flag-device-gpu")]


@pytest.mark.parametrize("case", ENTRY_POINT_CASES, ids=str)
def test_the_installed_command_gives_one_line_and_no_traceback(case: Case, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(case.text)
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)

    proc = orchestrate([str(spec), *case.args], tmp_path, {"PYTHONDONTWRITEBYTECODE": "1"}, timeout=60)

    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    check_one_line(proc.stderr, case, spec)
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["spec.yaml", *case.files])
