"""How a trial's record reads in MLflow: the run statuses, the metrics and parameters as logged,
and the child runs of a study's parent run. Shared by the writer (``tracking``) and the comparison
(``agreement``); mlflow is imported only by the functions that call it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from orchestrator.outcome import Status

# A trial's MLflow run status. Out of memory, fits-but-swaps and predicted out of memory are results
# (the configuration's answer, told by the `status` tag), so FINISHED, not MLflow's red failure mark;
# a failure of the code or the process is FAILED; a trial cut off (it runs again) KILLED.
MLFLOW_STATUS: dict[str, str] = {Status.OK: "FINISHED", Status.OOM: "FINISHED", Status.SWAPPED: "FINISHED", Status.SKIPPED: "FINISHED",
                 Status.INTERRUPTED: "KILLED"}  # every other status: FAILED
TERMINAL = ("FINISHED", "FAILED", "KILLED")

COLOR_TAG = "mlflow.runColor"
"""The run's colour in MLflow's UI (the dot beside its name, its line in the charts)."""
RUN_COLORS: dict[str, str] = {Status.OK: "#1a7f37", Status.SWAPPED: "#bf8700", Status.OOM: "#e8590c", Status.SKIPPED: "#8c959f",
              Status.INTERRUPTED: "#57606a", Status.REPEAT: "#d0d7de", Status.DEFERRED: "#d0d7de"}
"""A colour per status: measured green, swapped amber, out of memory orange, predicted out of
memory (skipped, no process ran) grey; every failure (``error``, ``crashed``, ``timeout``,
``diverged``) red, ``FAILURE_COLOR``."""
FAILURE_COLOR = "#cf222e"


def run_color(status: str) -> str:
    return RUN_COLORS.get(status, FAILURE_COLOR)


def initials(name: str) -> str:
    """``batch_size`` -> ``bs``; a name of one word as it is."""
    return name if "_" not in name else "".join(w[:1] for w in name.split("_") if w)


def short_names(swept: tuple[str, ...] | list[str]) -> dict[str, str]:
    """What a run name calls each swept parameter: a name of one word as it is (``dtype``), a
    longer one by its words' initials (``batch_size`` -> ``bs``, ``grad_accum_steps`` -> ``gas``),
    unless two would be called alike (then both keep their names)."""
    short = {k: initials(k) for k in swept}
    counts: dict[str, int] = {}
    for v in short.values():
        counts[v] = counts.get(v, 0) + 1
    return {k: v if counts[v] == 1 and (v == k or v not in swept) else k for k, v in short.items()}


def run_name(number: int, params: dict[str, Any], swept: tuple[str, ...] | list[str]) -> str:
    """A trial run's name: its number as the command's lines print it (``#3``), then the value
    of each swept parameter, so that the configuration reads whole in MLflow's pinned name column
    (``#3 bs=16 dtype=bfloat16 gas=2``) on a laptop's first screen."""
    names = short_names(swept)
    parts = [f"{names[k]}={param_text(params[k]).lower() if isinstance(params[k], bool) else param_text(params[k])}"
             for k in swept if k in params]
    return " ".join([f"#{number}", *parts])


def name_legend(swept: tuple[str, ...] | list[str]) -> str:
    """What the short names of ``run_name`` stand for (``bs = batch_size, gas = grad_accum_steps``)."""
    return ", ".join(f"{v} = {k}" for k, v in short_names(swept).items() if v != k)


def child_runs(client: Any, experiment_id: str, parent_id: str | None) -> dict[int, list[Any]]:
    """The child runs of run ``parent_id``, by their ``trial_number`` tag (read only)."""
    out: dict[int, list[Any]] = {}
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
                                  max_results=1000, page_token=token)
        for run in page:
            number = run.data.tags.get("trial_number")
            if number is not None and number.isdigit():
                out.setdefault(int(number), []).append(run)
        token = page.token
        if not token:
            return out


def metric_batch(metrics: dict[str, float]) -> list[Any]:
    """MLflow `Metric`s of ``metrics`` as logged (``logged_metrics``), stamped now, at step 0."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(k, v, now, 0) for k, v in logged_metrics(metrics).items()]


def logged_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics as MLflow is given them: numbers only (no NaN), 7 significant digits (readable
    in the UI, and finer than any measurement's noise)."""
    return {k: float(f"{v:.7g}") for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}


def param_text(value: object) -> str:
    """A parameter's value as an MLflow param."""
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
