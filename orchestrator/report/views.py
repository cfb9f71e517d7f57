"""The runs table a sweep is compared in: a view saved on each experiment (an experiment tag
MLflow's UI reads for ``?viewStateShareKey=``), its columns and their widths, and the one-line
legend above it. ``orchestrate ui`` saves them on a local store's server or a tracking server."""

from __future__ import annotations

import json
from typing import Any

from orchestrator import metrics as M
from orchestrator.store.tracking import quiet_mlflow_logs

NOTE = "mlflow.note.content"  # the run description MLflow's UI shows
VIEW_KEY = "orchestrate"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # MLflow's UI: an experiment tag per shared view
VIEW_METRICS = (M.SAMPLES_PER_S, M.PEAK_MEMORY_GIB, M.STEP_TIME_MS_P50, M.THROUGHPUT_CV, M.DURATION_S)


# -- the runs table: a saved view in which trials are compared ------------------------------------

def column(kind: str, name: str) -> str:
    """A runs-table column as MLflow's UI names it (``metrics.`samples_per_s```)."""
    return f"{kind}.`{name}`"


RUN_NAME, CREATED = "attributes.`Run Name`", "runDateAndNestInfo"
"""MLflow's two pinned columns: the run's name (which holds the swept values: ``runs.run_name``)
and its start time with the run status mark."""
CREATED_WIDTH = 44
"""Room for the run status mark only (the start time, cut off, is in the run's page)."""
SPREAD_METRICS = (M.THROUGHPUT_CI95, M.THROUGHPUT_CV)
"""The throughput's spread, shown beside it: the first of these the runs have (``throughput_ci95``,
the 95% half-width every trial records; ``throughput_cv`` alone in studies recorded before it)."""


def name_width(names: list[str]) -> int:
    """The pinned name column's width for the longest run name (its colour dot and padding
    included; MLflow's table font is about 6 px a character)."""
    return max(90, min(360, round(6 * max((len(n) for n in names), default=0)) + 52))


def view_state(trial_params: list[dict[str, str]], metric_keys: set[str], objective: str = M.SAMPLES_PER_S,
               maximize: bool = True, names: list[str] | None = None,
               statuses: list[str] | None = None) -> dict[str, Any]:
    """The runs table a sweep is compared in: trial runs only, flat (not nested under the parent),
    best first. The first screen holds the answer: each run's name carries its swept values
    (``runs.run_name``: the pinned column, as wide as the longest), then its status, the
    objective, throughput with its spread, and peak memory; the swept parameters follow as
    columns of their own, then the other headline metrics. At 1400 px, with MLflow 3.17's sidebar
    and its assistant panel open (it opens itself on a local server's first visit), about 770 px
    of table are left (tests/report/test_ui_browser.py measures what is on screen)."""
    swept = [k for k in dict.fromkeys(k for p in trial_params for k in p)
             if len({p.get(k) for p in trial_params}) > 1]
    spread = next((m for m in SPREAD_METRICS if m in metric_keys), None)
    answer = [m for m in dict.fromkeys((objective, M.SAMPLES_PER_S, spread, M.PEAK_MEMORY_GIB))
              if m is not None and m in metric_keys]
    more = [m for m in VIEW_METRICS if m in metric_keys and m not in answer]
    named = [("tags", "status")] + [("metrics", m) for m in answer] + [("params", k) for k in swept] + \
        [("metrics", m) for m in more]
    cols = [column(kind, name) for kind, name in named]
    # about 7 px a character of the header or of the longest value (a parameter's, a status: float16
    # and float32 must not both read "float..."), and padding (the objective's header has the sort mark)
    shown = {("tags", "status"): statuses or ["skipped"],
             **{("params", k): [str(p[k]) for p in trial_params if k in p] for k in swept}}
    widths = {column(kind, name): max(70 if kind == "tags" else 60, 7 * len(name) + (26 if name == objective else 16),
                                      7 * max(map(len, shown.get((kind, name), [""]))) + 16)
              for kind, name in named}
    pinned = {RUN_NAME: name_width(names or []), CREATED: CREATED_WIDTH}
    return {"searchFilter": "tags.role = 'trial'", "orderByKey": column("metrics", objective),
            "orderByAsc": not maximize, "selectedColumns": cols, "columnOrder": [RUN_NAME, CREATED, *cols],
            "columnWidths": {**pinned, **widths}}


LEGEND_PREFIX = "Run names: "


def legend(runs: list[Any]) -> str:
    """The experiment's description (one line above the runs table): what the run names'
    short parameter names stand for, and what the dot's colour says."""
    from orchestrator.store.runs import initials

    used = {token.split("=", 1)[0] for r in runs for token in (r.info.run_name or "").split()[1:] if "=" in token}
    keys = sorted({k for r in runs for k in r.data.params})
    names = [f"{initials(k)} = {k}" for k in keys if initials(k) != k and initials(k) in used and initials(k) not in keys]
    return (LEGEND_PREFIX + "the trial's number, then its swept values" + (f" ({', '.join(names)})" if names else "")
            + ". The dot: green measured, amber swapped, orange out of memory, light grey skipped (predicted out "
              "of memory, not run), dark grey interrupted (it runs again when the sweep resumes), red failed.")


def save_views(uri: str, url: str, objective: str = M.SAMPLES_PER_S, maximize: bool = True,
               only: str | None = None) -> list[tuple[str, str]]:
    """Save the comparison view on each experiment (or ``only`` the named one) that holds trial
    runs: an experiment tag MLflow's UI reads for ``?viewStateShareKey=``. Returns (name, URL)."""
    from mlflow.tracking import MlflowClient

    quiet_mlflow_logs()
    client = MlflowClient(tracking_uri=uri)
    out = []
    for exp in client.search_experiments():
        if only is not None and exp.name != only:
            continue
        runs = client.search_runs([exp.experiment_id], filter_string="tags.role = 'trial'", max_results=1000)
        page = f"{url}#/experiments/{exp.experiment_id}"
        if runs:
            state = view_state([r.data.params for r in runs], {k for r in runs for k in r.data.metrics},
                               objective, maximize, [r.info.run_name for r in runs],
                               [r.data.tags.get("status", "") for r in runs])
            client.set_experiment_tag(exp.experiment_id, VIEW_TAG_PREFIX + VIEW_KEY, json.dumps(state))
            note = exp.tags.get(NOTE, "")
            if not note or note.startswith(LEGEND_PREFIX):  # never over a description of the user's
                client.set_experiment_tag(exp.experiment_id, NOTE, legend(runs))
            page += f"/runs?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
        if runs or exp.name != "Default":
            out.append((exp.name, page))
    return out
