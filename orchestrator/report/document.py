"""What ``orchestrate report`` says about a study: its JSON document and its text, from one read.

Pure functions over a study's trials (``studyread.StoredTrial``s or Optuna's ``FrozenTrial``s) and
the spec; the only files read are the trials' own ``result.json`` (device, provenance, MPS
fallbacks). Nothing here opens MLflow or draws: ``report`` does that when plots are asked for.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import metrics as M
from orchestrator import trialdir
from orchestrator.clip import short_detail
from orchestrator.report.compare import comparison_lines
from orchestrator.report.noise import load_lines, median_window, noise_line, one_measurement
from orchestrator.harness import spread, swap
from orchestrator.outcome import RESULT_STATUSES, VERDICT_DETAIL, Status
from orchestrator.redact import pasteable, shown
from orchestrator.spec.load import DEFAULT_STORAGE, DEFAULT_TRACKING_URI, SweepSpec
from orchestrator.report.summary import best_table, fmt_num, fmt_params, fmt_seconds, of_target, throughput_text
from orchestrator.store.record import HasAttrs, TrialRecord, status_of
from orchestrator.store.studyrecord import StudyRecord
from orchestrator.urls import absolute_uri

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial
    from optuna import Study

COUNTED = RESULT_STATUSES  # ok, oom, swapped, skipped, timeout, crashed, diverged
TOP_MARK = "\n\n#### Top configurations"  # the part of the parent run's description a report rewrites


def paste_command(spec: SweepSpec, *words: str) -> str:
    """``orchestrate WORDS SPEC`` for a user to paste, with ``--storage`` and ``--tracking-uri``
    when either is not the default (so it reaches the same stores), their passwords left out."""
    stores = ["--storage", pasteable(spec.storage), "--tracking-uri", pasteable(spec.tracking_uri)] if (
        spec.storage != DEFAULT_STORAGE or spec.tracking_uri != DEFAULT_TRACKING_URI) else []
    from orchestrator.invocation import command

    return command(*words, str(spec.path), *stores)


def trial_row(t: FrozenTrial) -> dict[str, Any]:
    rec = TrialRecord.of(t)
    return {"number": t.number, "state": t.state.name,
            "status": rec.status_text if rec.status is not None else t.state.name.lower(), "params": dict(t.params),
            "values": list(t.values) if t.values else None, "metrics": rec.metrics,
            "duration_s": rec.duration_s, "detail": rec.detail,
            "repeat_of": rec.repeat_of, "mlflow_run_id": rec.mlflow_run_id,
            "processes": rec.process_count, "neighbour_of": rec.neighbour_of,
            "retry_of": rec.retry_of, "retry_reason": rec.retry_reason,
            "remeasure_of": rec.remeasure_of, "measurements": rec.measurements,
            "mps_fallback_ops": _fallback_ops(t), "slot": rec.slot}


def link_retries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A configuration's history: each row a later trial ran again (user attribute ``retry_of``
    on that trial, ``retry_reason`` the earlier status) gets ``retried_as``, that trial's number."""
    by_number = {r["number"]: r for r in rows}
    for r in rows:
        r.setdefault("retried_as", None)
        r.setdefault("remeasured_as", None)
    for r in rows:
        earlier = by_number.get(r["retry_of"]) if r["retry_of"] is not None else None
        if earlier is not None:
            earlier["retried_as"] = r["number"]
        again = by_number.get(r.get("remeasure_of")) if r.get("remeasure_of") is not None else None
        if again is not None:  # measured again: the later trial holds both measurements
            again["remeasured_as"] = r["number"]
    return rows


def held(spec: SweepSpec, device: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each interrupted or 'error' row not run again gets ``dropped``: whether the spec, edited since
    (a study with no result takes an edit), no longer holds its configuration, which the sweep then
    does not queue again (``recovery.retry_queue``): its note said "its configuration runs again"."""
    from orchestrator.search.space import applicable, contains, make_plan

    plan = make_plan(spec, device)  # the sweep's, from the device it runs on
    for r in rows:
        params = r["params"]
        # a trial cut off while Optuna was given its configuration holds part of it: the sweep runs it
        # again whole, from what it was enqueued with (``retry_queue``), and says nothing of an edit
        partial = set(params) < set(applicable(plan, params.get("device", plan.device)))
        if r["status"] in (Status.INTERRUPTED, Status.ERROR) and r.get("retried_as") is None and not partial:
            r["dropped"] = not contains(plan, params)
    return rows


def retry_note(r: dict[str, Any]) -> str:
    """The history part of a row's note: ``retry of #3 (it ended error)``, ``run again as #7``."""
    parts = []
    if r.get("retry_of") is not None:
        parts.append(f"retry of #{r['retry_of']} (it ended {r.get('retry_reason') or Status.INTERRUPTED})")
    if r.get("retried_as") is not None:
        parts.append(f"run again as #{r['retried_as']}" + (f" (--retry {r['status']}), no longer a result"
                                                           if r["status"] in COUNTED else ""))
    if r.get("remeasure_of") is not None:
        parts.append(f"#{r['remeasure_of']}'s configuration measured again")
    if r.get("remeasured_as") is not None:
        parts.append(f"measured again as #{r['remeasured_as']}, which holds the result")
    return "; ".join(parts)


def _fallback_ops(t: HasAttrs) -> list[str] | None:
    """Ops that fell back from MPS to the CPU (names from the result file; the count is a metric)."""
    n = TrialRecord.of(t).metrics.get(M.MPS_FALLBACK_OPS)
    if not n:
        return [] if n is not None else None
    ops = (result_file(t).get("info") or {}).get("mps_fallback_ops")
    return list(ops) if ops else [f"{int(n)} op(s), names not recorded"]


def build_report(spec: SweepSpec, study: Any, snapshot: list[Any], results: list[Any], best: list[Any],
                 comp: dict[str, Any] | None = None, prov: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything ``report`` prints, as plain values (the JSON document, less the plots), from one
    read of the study: ``snapshot`` (its trials), ``results`` and ``best`` derived from it, the
    comparison ``comp`` (``compare.comparison``) and ``prov`` (``provenance``: where it ran)."""
    trials = [t for t in snapshot if t.state.name != "WAITING"]
    multi = len(spec.objective.metrics) > 1
    counts = Counter(status_of(t) for t in results)
    prov = prov or {}
    device, device_name = device_of(spec, study, next(iter(results), None)), prov.get("device_name")
    if "device" in spec.space:  # swept: no one device (nor its name) speaks for the study
        device, device_name = " and ".join(map(str, spec.space["device"].values)), None  # type: ignore[union-attr]  # device is always a list (a Choice)
    return {
        "study": spec.name, "storage": shown(absolute_uri(spec.storage)),
        "objective": [list(m) for m in spec.objective.metrics],
        "target": study_target(spec, study),
        "trials": held(spec, device_of(spec, study), link_retries([trial_row(t) for t in trials])),
        "results": len(results), "counts": {s.value: counts.get(s, 0) for s in COUNTED},
        "not_results": len(trials) - len(results),
        "total_time_s": round(sum(TrialRecord.of(t).duration_s or 0 for t in trials), 3),
        "best": trial_row(pick_best(spec, best)) if best else None,
        "pareto": [trial_row(t) for t in best] if multi else None,
        "comparison": comp, "device": device, "device_name": device_name, "torch_version": prov.get("torch_version"),
        "noise": {**dict(zip(("one_measurement_ci95", "trials"), one_measurement(results))),
                  "window_s": median_window(results)},
        "load": StudyRecord.of(study).load if study is not None else None,
    }


def device_of(spec: SweepSpec, study: Study, t: Any = None) -> str:
    """The device a trial ran on: its result file, its params, the study's plan, the spec."""
    applied = result_file(t).get("applied", {}) if t is not None else {}
    device = applied.get("device") or (t.params.get("device") if t is not None else None)
    if study is not None:
        device = device or (StudyRecord.of(study).fingerprint or {}).get("device")
    if device in (None, "swept"):
        from orchestrator.search.space import guess_device

        device = spec.device if spec.device != "auto" else guess_device()
    return device


def script_command(spec: SweepSpec, study: Any, t: FrozenTrial) -> str | None:
    """A script spec's trial ``t`` as the command line that trains it (None for a module's spec),
    with Python named as the user runs this venv's (``invocation.tool``)."""
    if spec.script is None:
        return None
    from orchestrator.invocation import tool
    from orchestrator.search.space import make_plan, trial_params
    from orchestrator.spec.script import pasteable

    device = device_of(spec, study, t)
    return pasteable(spec, trial_params(make_plan(spec, device), t.params), tool("python"))


def study_target(spec: SweepSpec, study: Study) -> int | None:
    """How many results the study asks for: ``search.n_trials``, at most every configuration (None: neither)."""
    from orchestrator.search.space import count_configurations, make_plan

    n = count_configurations(make_plan(spec, device_of(spec, study)))
    known = [x for x in (spec.search.n_trials, n) if x is not None]
    return min(known) if known else None


def result_file(t: HasAttrs) -> dict[str, Any]:
    folder = TrialRecord.of(t).trial_dir if t is not None else None
    try:
        data = json.loads((Path(folder) / trialdir.RESULT).read_text()) if folder else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def provenance(trials: list[Any]) -> dict[str, Any]:
    """device_name, total_memory_gib, torch_version from the first trial result that has them."""
    for t in trials:
        prov = result_file(t).get("provenance") or {}
        if prov.get("device_name"):
            return prov
    return {}


def render_text(spec: SweepSpec, rep: dict[str, Any]) -> str:
    rows = rep["trials"]
    names = list(dict.fromkeys(k for r in rows for k in r["params"]))
    width = {k: max([len(k)] + [len(str(r["params"].get(k, "-"))) for r in rows]) for k in names}
    align = {k: ">" if all(isinstance(r["params"].get(k), (int, float)) for r in rows) else "<" for k in names}
    slots = {r["slot"] for r in rows if r.get("slot")}
    slot_w = max(map(len, slots | {"slot"})) if len(slots) > 1 else 0  # a column where trials ran on several slots
    head = f"{'#':>4s}  {'status':<11s} " + " ".join(f"{k:{align[k]}{width[k]}s}" for k in names) + \
        f" {'samples/s':>10s} {'+-95%':>7s} {'peak GiB':>8s} {'time s':>7s}" + \
        (f"  {'slot':<{slot_w}s}" if slot_w else "") + "  note"
    where = rep["device"] + (f" ({rep['device_name']})" if rep["device_name"] else "")
    lines = [f"{spec.name}: {of_target(rep['results'], rep['target'] or '?')} trials have a result; on {where}"
             + (f", torch {rep['torch_version']}" if rep["torch_version"] else ""),
             f"Study: {rep['storage']} (study {spec.name!r})", "", head]
    for r in rows:
        note = f"repeat of #{r['repeat_of']}, not a result" if r["repeat_of"] is not None else \
            "stopped by the search's verdict; not a result" if r["detail"] == VERDICT_DETAIL else \
            "cut off: no orchestrator is running it; the next run records it interrupted and runs it again" \
            if r.get("cut_off") else \
            "not a result" + ("" if r.get("retried_as") is not None else "; the spec no longer holds its "
                              "configuration, so it does not run again" if r.get("dropped") else
                              "; its configuration runs again") \
            if r["status"] == Status.INTERRUPTED else \
            swap_note(r["metrics"]) or _short(r["detail"] or "") if r["status"] == Status.SWAPPED else \
            _short(r["detail"] or "") if r["status"] != Status.OK else _ok_note(r)
        history = retry_note(r)
        if r.get("dropped") and r["status"] == Status.ERROR:
            note = f"{note}; not run again: the spec no longer holds its configuration"
        if history:
            note = f"{history}; {note}" if note else history
        if r.get("mps_fallback_ops"):
            fell = "MPS fell back to the CPU for " + ", ".join(r["mps_fallback_ops"])
            note = f"{note}; {fell}" if note else fell
        m = r["metrics"]
        lines.append(f"{r['number']:>4d}  {r['status']:<11s} " + " ".join(
            f"{str(r['params'].get(k, '-')):{align[k]}{width[k]}s}" for k in names) +
            f" {fmt_num(m.get(M.SAMPLES_PER_S)):>10s} {spread_text(m):>7s} {fmt_num(m.get(M.PEAK_MEMORY_GIB), digits=2):>8s}"
            f" {fmt_num(r['duration_s']):>7s}" + (f"  {r.get('slot') or '-':<{slot_w}s}" if slot_w else "")
            + f"  {note}".rstrip())
    if not rows:
        lines.append("  (no trials yet)")
    counts = ", ".join(f"{n} {s}" for s, n in rep["counts"].items() if n) or "none yet"
    lines += ["", f"Results: {counts}; trial time {fmt_seconds(rep['total_time_s'])}"]
    if stopped := ((rep.get("load") or [{}])[-1] or {}).get("stopped"):
        lines.append(f"Stopped (the last run): {stopped}.")
    if rep["not_results"]:
        again = sum(r.get("remeasured_as") is not None for r in rows)
        errors = [r for r in rows if r.get("status") == "error"]
        which = "interrupted, running, repeated or ended 'error'" if errors else "interrupted, running or repeated"
        lines.append(f"  {rep['not_results']} trial(s) {which} are shown above but are not "
                     "results and not counted" + (" (a configuration whose trial ended 'error' runs again on the next "
                                                  "run)" if any(not r.get("dropped") for r in errors) else "") + (f" ({again} of them measured again later: the later trial holds "
                                                  "the configuration's result)" if again else ""))
    if noisy := noise_line(spec, [], (rep.get("load") or [None])[-1], rep["noise"].get("one_measurement_ci95"),
                           rep["noise"].get("trials", 0), rep["noise"].get("window_s")):
        lines.append(noisy)
    lines += load_lines(rep.get("load"))
    lines += memory_pressure_lines(rows)
    if rep.get("comparison"):
        lines += [""] + comparison_lines(rep["comparison"])
    return "\n".join(lines)


def spread_text(metrics: dict[str, Any]) -> str:
    """A throughput's 95% half-width for the table (``throughput_ci95``), ``-`` where none."""
    ci = metrics.get(M.THROUGHPUT_CI95)
    return spread.shown(ci, table=True) if isinstance(ci, (int, float)) else "-"


def swap_note(metrics: dict[str, Any]) -> str:
    """``fits but swaps: 1.23 GiB out, 0.80 GiB in during the window; ...`` from a trial's figures."""
    out, inn = metrics.get(M.SWAP_OUT_GIB), metrics.get(M.SWAP_IN_GIB)
    if out is None:
        return ""
    used, before = metrics.get(M.SWAP_USED_GIB), metrics.get(M.SWAP_USED_BEFORE_GIB)
    text = f"fits but swaps: {out:.2f} GiB out, {inn or 0:.2f} GiB in during the window"
    if used is not None:
        text += f"; swap in use {used:.2f} GiB" + (f" ({before:.2f} before the trial)" if before is not None else "")
    return text


def memory_pressure_lines(rows: list[dict[str, Any]]) -> list[str]:
    """After the table: trials that fit only by swapping, and trials in which ops fell back to the CPU."""
    out = []
    swapped = [r for r in rows if r["status"] == Status.SWAPPED and r["repeat_of"] is None]
    if swapped:
        out.append(f"Fits but swaps: {len(swapped)} trial(s) ({', '.join('#' + str(r['number']) for r in swapped)}) "
                   "fitted only by swapping during the timed window: recorded as swapped, infeasible like an OOM "
                   "and a memory boundary for skipping (search.allow_swap: true accepts them)")
    fell: dict[str, list[int]] = {}
    for r in rows:
        for op in r.get("mps_fallback_ops") or ():
            fell.setdefault(op, []).append(r["number"])
    if fell:
        out.append("MPS fallbacks: ops that ran on the CPU instead (slower; PYTORCH_ENABLE_MPS_FALLBACK=1): "
                   + "; ".join(f"{op} (#{', #'.join(map(str, ns))})" for op, ns in fell.items()))
    return out


def _ok_note(r: dict[str, Any]) -> str:
    """How a measured trial came about: its repeats' spread, and whether the sweep queued it as the
    nearest neighbour of a configuration the sampler proposed again."""
    parts = []
    spread = r["metrics"].get(M.SAMPLES_PER_S + "_spread")
    if r.get("processes", 1) > 1 and spread is not None:
        parts.append(f"median of {r['processes']}, spread {spread:.0%}")
    if r.get("neighbour_of") is not None:
        parts.append(f"neighbour of #{r['neighbour_of']}")
    m = r["metrics"]
    if m.get(M.COMPILE_S) is not None:  # compile: true, apart from the rest of its start-up and its window
        startup, window = m.get(M.STARTUP_S), m.get(M.MEASURE_S)
        parts.append(f"compiled in {m[M.COMPILE_S]:.1f} s" + (f" of its {startup:.1f} s start-up" if startup else "")
                     + (f", window {window:.2f} s" if window else ""))
    if swap.swapped(m):  # measured with search.allow_swap: true
        parts.append(swap_note(m).replace("fits but swaps", "swapped (allowed by search.allow_swap)"))
    elif (m.get(M.WARMUP_SWAP_OUT_GIB) or 0) >= swap.SWAP_THRESHOLD_GIB:
        parts.append(f"swapped {m[M.WARMUP_SWAP_OUT_GIB]:.2f} GiB out during warm-up, not in the window")
    return "; ".join(parts)


def _short(detail: str, width: int = 120) -> str:
    """A failure's detail for the table: without the CPU allocator's boilerplate (which hides the
    message), cut at a sentence end or a word where it is long (``clip``)."""
    return short_detail(detail, width)


def pick_best(spec: SweepSpec, best: list[Any]) -> Any:
    """The best feasible trial; on a Pareto front, the member best on the first objective."""
    if not best:
        return None
    sign = -1 if spec.objective.metrics[0][1] == "maximize" else 1
    return min(best, key=lambda t: sign * t.values[0])


def best_lines(spec: SweepSpec, best: list[Any], header: str = "Best feasible configurations:",
               results: list[Any] | None = None) -> list[str]:
    """The ranked table and the one best (``pick_best``: on a front, the member best on the first
    objective) with its command: the same in ``report`` and in a sweep's own summary; with no
    best, why (``results``: the constraints each result broke)."""
    from orchestrator.store.records import constraints_missed

    multi = len(spec.objective.metrics) > 1
    missed = constraints_missed(spec, results) if results and not best else None
    out = ["Pareto front:" if multi else header] + best_table(spec, best, missed=missed)
    b = pick_best(spec, best)
    if b is not None:
        m = TrialRecord.of(b).metrics
        out.append(("Best on " + spec.objective.metrics[0][0] + " among the front: " if multi else "Best: ") +
                   f"trial {b.number}: {fmt_params(b.params)} -> {throughput_text(spec, m)}, "
                   f"peak {fmt_num(m.get(M.PEAK_MEMORY_GIB), ' GiB', 2)}")
        if (line := script_command(spec, None, b)) is not None:
            out.append(f"Command: {line}")
        if (doubt := batch_doubt(spec, results if results is not None else best)) is not None:
            out.append(doubt)
    return out


def batch_doubt(spec: SweepSpec, results: list[Any]) -> str | None:
    """``Caveat:`` where two of the script's ok trials of different ``batch_size`` drew the same
    samples per step from its DataLoader (``BatchFlag``): the swept batch does not reach it."""
    if spec.script is None or "batch_size" not in spec.space:
        return None
    from orchestrator.outcome import Status
    from orchestrator.report.batchflag import BatchFlag

    said = BatchFlag(True, {"batch_size": None}).after(
        [(t.number, t.params, result_file(t).get("info") or {}) for t in results if status_of(t) == Status.OK])
    return None if said is None else "Caveat: " + said.removeprefix("orchestrate: ")


def top_markdown(spec: SweepSpec, ranked: list[Any], comp: dict[str, Any] | None = None, limit: int = 5) -> str:
    """The parent run's description gets the best configurations as a table and the plots, and the
    comparison's summary when the device (or ``--compare``'s knob) was swept."""
    best = ranked[:limit]
    if not best:
        return ""
    names = list(dict.fromkeys(k for t in best for k in t.params))
    out = [TOP_MARK, "", "| trial | " + " | ".join(names) + " | samples/s | peak GiB |",
           "|---" * (len(names) + 3) + "|"]
    for t in best:
        m = TrialRecord.of(t).metrics
        out.append(f"| {t.number} | " + " | ".join(str(t.params.get(k, "")) for k in names) +
                   f" | {fmt_num(m.get(M.SAMPLES_PER_S))} | {fmt_num(m.get(M.PEAK_MEMORY_GIB), digits=2)} |")
    if comp:
        out += [""] + ["    " + ln for ln in comparison_lines(comp)]  # an indented block: MLflow shows it as is
    return "\n".join(out) + f"\n\nPlots: the `report/` artifacts (`{paste_command(spec, 'report')} --plots`)."
