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
MLFLOW_STATUS = {Status.OK: "FINISHED", Status.OOM: "FINISHED", Status.SWAPPED: "FINISHED", Status.SKIPPED: "FINISHED",
                 Status.INTERRUPTED: "KILLED"}  # every other status: FAILED
TERMINAL = ("FINISHED", "FAILED", "KILLED")


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


def param_text(value: Any) -> str:
    """A parameter's value as an MLflow param."""
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
