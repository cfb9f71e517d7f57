"""Write a finished study's results as a landscape table for the search-efficiency benchmark.

    python bench/export_landscape.py sqlite:///docs/gpu/landscape.db landscape_bert_base_cuda \\
        bench/landscapes/bert_base_h200_cap015.csv

One row per configuration that has a result (ok, oom, timeout, crashed, error, diverged; trials
that were interrupted, skipped or answered as a repeat are left out), in trial order: the swept
parameters as columns (booleans as true/false), then status, samples_per_s and peak_memory_gib
(empty unless ok) and duration_s (wall time of the trial's process). ``orchestrator.replay.strategies``
reads it back.

A study measured with ``trial.repeats: N`` gives the median throughput and the largest peak of its
N processes, and as ``duration_s`` the mean wall time of one process (the trial's recorded
duration divided by the processes it ran): what one measurement of the configuration costs, so
that a replayed search is charged as a search with one process per trial would be.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.replay.landscape import RECORDED_STATUSES as EXPORTED, RESULT_COLUMNS  # noqa: E402  (what replay reads)


def cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def landscape_rows(study: Any) -> tuple[list[str], list[dict[str, str]]]:
    trials = [t for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
              if t.user_attrs.get("status") in EXPORTED and "repeat_of" not in t.user_attrs]
    if not trials:
        raise SystemExit(f"study {study.study_name!r} has no trial with a result")
    columns = list(trials[0].params)
    rows, seen = [], set()
    for t in trials:
        if set(t.params) != set(columns):
            raise SystemExit(f"trial {t.number} has parameters {sorted(t.params)}, trial "
                             f"{trials[0].number} has {sorted(columns)}: not one landscape")
        key = tuple(cell(t.params[c]) for c in columns)
        if key in seen:
            raise SystemExit(f"trial {t.number}: configuration {t.params} has two results")
        seen.add(key)
        metrics = t.user_attrs.get("metrics", {}) or {}
        ok = t.user_attrs["status"] == "ok"
        row = {c: cell(t.params[c]) for c in columns}
        row.update(status=t.user_attrs["status"],
                   samples_per_s=cell(round(metrics["samples_per_s"], 3) if ok else None),
                   peak_memory_gib=cell(round(metrics["peak_memory_gib"], 4) if ok and "peak_memory_gib" in metrics else None),
                   duration_s=cell(round(t.user_attrs["duration_s"] / t.user_attrs.get("processes", 1), 3)))
        rows.append(row)
    return columns, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("storage", help="the study's storage URL, e.g. sqlite:///docs/gpu/landscape.db")
    p.add_argument("study", help="the study name")
    p.add_argument("out", type=Path, help="the CSV file to write")
    args = p.parse_args(argv)

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    columns, rows = landscape_rows(study)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*columns, *RESULT_COLUMNS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    counts = {s: sum(r["status"] == s for r in rows) for s in EXPORTED}
    print(f"{args.out}: {len(rows)} configurations of {', '.join(columns)} "
          f"({', '.join(f'{n} {s}' for s, n in counts.items() if n)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
