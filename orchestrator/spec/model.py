"""What a checked sweep spec is: frozen dataclasses, built only by ``orchestrator.spec.load`` after every
rule in ``orchestrator.spec.rules`` has passed. Nothing here reads a file.

This is also where the spec is documented: ``orchestrator.spec.schema`` reads each YAML-facing field's
type (a ``Literal`` is a set of words, ``Bound`` a numeric limit), default and the docstring under
it, and writes the JSON Schema and the reference page from them. A new field needs its check in
``orchestrator.spec.rules``, a docstring here, and ``orchestrate schema`` run again (the command is in the
failing test's message)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from orchestrator.errors import SpecError
from orchestrator.spec.yamlsource import dotted
from orchestrator.urls import DEFAULT_STORAGE, DEFAULT_TRACKING_URI  # noqa: F401 - the spec's defaults

Sampler = Literal["auto", "grid", "random", "tpe", "nsga2"]
Stop = Literal["auto", "budget"]
Direction = Literal["maximize", "minimize"]
SAMPLERS = ("auto", "grid", "random", "tpe", "nsga2")
STOPS = ("auto", "budget")
DIRECTIONS = ("maximize", "minimize")
MAX_TRIAL_REPEATS = 20

Order = Union[str, dict]
"""How memory grows with a parameter: one of ``ORDER_WORDS`` or a mapping of value to rank
(``search/dominance.py`` applies it)."""
ORDER_WORDS = ("increasing", "decreasing", "neutral")

DEFAULT_ORDER: dict[str, Order] = {
    "batch_size": "increasing",
    "seq_len": "increasing",
    "effective_batch_size": "increasing",  # more accumulation at the same micro-batch: see grad_accum_steps
    "grad_accum_steps": "increasing",  # from 2 on, one more gradient-sized buffer (see the module)
    "dtype": {"float32": 2, "float16": 1, "bfloat16": 1},
    "activation_checkpointing": {False: 1, True: 0},
    "compile": {False: 1, True: 0},  # fused kernels keep fewer activations: the compiled peak was at most the
    # eager one's (+0.2%) in all 15 fitting pairs of two H100 landscapes, and 2 fitted only compiled
    "memory_fraction": "decreasing",
    "cpu_memory_limit_gib": "decreasing",
    "lr": "neutral",
    "seed": "neutral",
}

MAX_CONFIGURATIONS = 100_000
"""The most configurations a finite space (lists and stepped ranges) may hold, and the most values a
range may list: more is a mistake (a grid over it would not end, and listing it would take more
memory than any sweep), refused when the spec is loaded."""


@dataclass(frozen=True)
class Bound:
    """A numeric field's limits, as its type says them (``Annotated[int, Bound(minimum=1)]``):
    ``minimum`` and ``maximum`` inclusive, ``above`` exclusive. ``orchestrator.spec.rules`` enforces them (with
    its own wording) and ``orchestrator.spec.schema`` publishes them; a test holds the two together."""

    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None


PositiveInt = Annotated[int, Bound(minimum=1)]
NonNegativeInt = Annotated[int, Bound(minimum=0)]
PositiveFloat = Annotated[float, Bound(above=0)]
NonNegativeFloat = Annotated[float, Bound(minimum=0)]


@dataclass(frozen=True)
class Choice:
    """A categorical dimension: one of the listed values."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Range:
    """A numeric dimension; both bounds inclusive, as in Optuna."""

    low: float
    high: float
    step: float | None = None
    log: bool = False
    integer: bool = False

    def grid_values(self) -> tuple[Any, ...]:
        """The values a grid visits, both bounds included; needs a step (the validator makes
        ``high - low`` a multiple of it)."""
        assert self.step is not None
        if self.integer:
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step)))
        n = round((self.high - self.low) / self.step)
        return tuple(round(self.low + i * self.step, 12) for i in range(n)) + (self.high,)


Dimension = Choice | Range


@dataclass(frozen=True)
class Constraint:
    metric: str
    max: float | None = None
    min: float | None = None

    def violation(self, value: float) -> float:
        """Optuna's convention: <= 0 is feasible, the amount over the bound otherwise."""
        if self.max is not None:
            return value - self.max
        assert self.min is not None
        return self.min - value


@dataclass(frozen=True)
class Objective:
    metrics: tuple[tuple[str, Direction], ...]
    """(metric, direction) pairs; more than one makes a multi-objective study."""
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class SearchSettings:
    sampler: Sampler = "auto"
    """How configurations are proposed: ``auto`` (the ordered model search, ``planner``, for a
    finite space with one objective; TPE otherwise), ``grid`` (every configuration, in the order
    the space lists them), ``random``, ``tpe`` (Optuna's TPE, seeded) or ``nsga2``
    (multi-objective)."""
    n_trials: PositiveInt | None = None
    """The budget: at most this many trials with a result in the study, across resumes; absent =
    every configuration."""
    seed: NonNegativeInt | None = None
    """Seed of the sampler and of the tie-breaks between equally near configurations."""
    max_failures: NonNegativeInt = 10
    """Failures other than out-of-memory tolerated in one invocation before it stops (exit 3)."""
    timeout_min: PositiveFloat | None = None
    """Wall-clock budget of one invocation, in minutes: no new trial starts after it."""
    patience: PositiveInt | None = None
    """Stop after this many finished trials without a better feasible result (one objective
    metric only)."""
    skip_predicted_oom: bool = True
    """Skip (record as ``skipped``) configurations that need at least as much memory as one that
    ran out of memory, by ``memory_order``."""
    allow_swap: bool = False
    """A trial that swapped during its timed window is recorded ``swapped`` (infeasible, a memory
    boundary) unless this is true."""
    grace_period_s: Annotated[float, Bound(minimum=2)] = 60.0
    """With a server database shared by several orchestrators: a running trial whose orchestrator
    has not sent a heartbeat for this long is failed and its configuration run again."""
    memory_order: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ORDER))
    """Parameter -> how memory grows with it: ``increasing``, ``decreasing``, ``neutral``, or a
    mapping of value to rank (higher = more memory); merged over ``DEFAULT_ORDER`` (``orchestrator.spec.model``)."""
    stop: Stop = "auto"
    """``auto``: with the ``auto`` sampler, end the sweep once no configuration left is likely to
    beat the best measured by more than ``band``; ``budget``: run until ``n_trials`` (or the space)
    is used up."""
    band: Annotated[float, Bound(above=0, maximum=0.5)] = 0.02
    """How close to the best counts as found, for ``stop: auto``: a fraction of the best (0.02 =
    within 2%)."""
    outage_s: PositiveFloat = 300.0
    """How long a server database or tracking server may stay unreachable (a restart, a failover)
    before the orchestrator gives up with exit code 75; meanwhile every call is retried and the
    trials run on."""


@dataclass(frozen=True)
class TrialSettings:
    warmup_steps: PositiveInt = 3
    """Optimizer steps run before the timed window, not measured."""
    measure_steps: PositiveInt = 10
    """Optimizer steps the timed window holds at least."""
    min_measure_s: NonNegativeFloat = 1.0
    """The timed window also lasts at least this long (more steps are run if needed)."""
    timeout_s: PositiveFloat = 900.0
    """The trial's process group is killed after this long (imports not counted). Per process:
    with repeats, each repeat has this long."""
    repeats: Annotated[int, Bound(minimum=1, maximum=MAX_TRIAL_REPEATS)] | Literal["auto"] = "auto"
    """Processes per configuration; the recorded metrics are their median (memory: the largest).
    ``auto``: one, and where the auto search cannot tell its best from a rival within their spread,
    both measured again, alternating, before it stops (at most a quarter of the time the first
    measurements took); with another sampler, one."""
    precision: Annotated[float, Bound(above=0, maximum=0.5)] | None = None
    """Close the timed window before ``measure_steps`` once its throughput is known within this
    fraction at 95% (``throughput_ci95``; 0.005 = +-0.5%), after at least 5 steps; never before
    ``min_measure_s``, which may hold it past ``measure_steps`` as without. Unset (null): every
    window holds ``measure_steps``."""

    @property
    def processes(self) -> int:
        """Processes each trial runs: ``repeats``, or one for ``auto`` (the search measures again
        in trials of their own)."""
        return 1 if self.repeats == "auto" else self.repeats


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    name: str
    """The Optuna study's name and the MLflow experiment's: letters, digits, ``_``, ``.`` or ``-``,
    at most 100."""
    experiment: str | None
    """The Python module that builds the workload, e.g. ``experiments.bert`` (imported in a
    subprocess when the spec is checked); or give ``script`` instead."""
    device: str
    """Where trials run: ``auto`` = mps if available, else cuda, else cpu. Sweep it instead with
    ``space: {device: [mps, cpu]}``."""
    fixed: dict[str, Any]
    """Parameters passed unchanged to every trial: harness knobs and the experiment's own."""
    space: dict[str, Dimension]
    """Swept parameters: each a list of choices or a range ``{low, high, step, log}``."""
    objective: Objective
    """What a trial is judged by: one metric and its direction, or several (a Pareto front), and
    optional constraints."""
    search: SearchSettings
    """How the study proposes configurations and when it stops."""
    trial: TrialSettings
    """How each configuration is measured."""
    storage: str
    """Optuna storage URL (SQLAlchemy); ``postgresql+psycopg2://...`` lets several orchestrators
    share one study."""
    tracking_uri: str
    """MLflow tracking URI: a database URL, or ``http(s)://`` for a tracking server."""
    devices: tuple[str, ...] | None = None
    """Device slots, one trial in flight on each (``orchestrator.launch.slots``): ``auto`` (every visible
    GPU), or a list or comma-separated text of ``cuda:N``, ``cuda``, ``mps``, ``cpu`` or ``cpu:A-B``
    (a trial pinned to cores A to B); absent = one slot on ``device``."""
    script: str | None = None
    """A training script to run unchanged instead of an experiment module, e.g. ``train.py``:
    found in the spec's folder, then the working directory. Each trial runs it as ``__main__``
    with ``args`` and measures its optimizer steps from outside (docs/script.md)."""
    args: tuple[str, ...] = ()
    """The script's command-line arguments; ``{name}`` is filled from the trial's parameters
    (``{name:FORMAT}`` formats it, ``{{`` is a brace); an argument that is exactly ``{name}``
    with the value ``""`` is left out."""
    samples_per_step: str | float | None = None
    """Samples one optimizer step of the script trains on, as a number or an expression over
    parameter names (``batch_size * accum``); absent: counted from the batches its DataLoaders
    yield."""
    script_file: Path | None = field(default=None, compare=False, repr=False)
    """Where ``script`` was found when the spec was loaded (None: not there; a run refuses it)."""
    lines: dict[tuple, int] = field(default_factory=dict, compare=False, repr=False)
    flags: dict[tuple, str] = field(default_factory=dict, compare=False, repr=False)
    """The fields whose value a flag gave (``--device``), with the flag: ``error`` names it."""

    @property
    def workload(self) -> str:
        """What a trial runs: the experiment module's name, or the script's file."""
        if self.script is not None:
            return str(self.script_file or self.script)
        assert self.experiment is not None
        return self.experiment

    @property
    def workload_name(self) -> str:
        """The workload as the spec names it (the module, or the script as given)."""
        return self.script if self.script is not None else str(self.experiment)

    def line_of(self, *path: object) -> int | None:
        return self.lines.get(tuple(path))

    def error(self, path: tuple, rule: str) -> SpecError:
        """A rule broken by ``path``, found after loading (by the experiment probe, say): on the
        flag that gave its value, else on the spec's line."""
        if tuple(path) in self.flags:
            return SpecError(rule, file=self.flags[tuple(path)], field=dotted(path) or None)
        return SpecError(rule, file=str(self.path), line=nearest_line(self.lines, path),
                         field=dotted(path) or None)


def nearest_line(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of ``path``, else of its nearest parent that has one."""
    while True:
        line = lines.get(path)
        if line is not None or not path:
            return line
        path = path[:-1]
