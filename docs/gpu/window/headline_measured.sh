# The headline as shipped (sweeps/bert_memory.yaml, auto search, precision windows) from an empty
# store, in one folder the machine ran from before (the first command warms the CUDA driver's JIT
# cache there and is not compared: docs/gpu/first_step/), alternating this checkout ("after": the
# next trial's process prepared once a window is over) with .before40/ (commit 4c91f18's
# orchestrator/ and experiments/: prepared once the result is in):
#   rm -rf .before40 && mkdir .before40 && git archive 4c91f18 orchestrator experiments | tar -x -C .before40
# Per command: the wall, the trials, the answer, and the gaps between trials (from a trial's
# result told to the next one's start, ORCHESTRATE_TIMELINE). ORDER: the labels in order.
set -u
root=$PWD; known=$(mktemp -d)
one() {  # $1: label (after | before | warming)
  rm -rf "$known/mlruns" "$known/events.jsonl"
  local path=$root; [ "$1" = before ] && path=$root/.before40
  local t0; t0=$(date +%s.%N)
  (cd "$known" && ORCHESTRATE_TIMELINE="$known/events.jsonl" PYTHONPATH="/tmp/site:$path" timeout 200 \
      python3 -m orchestrator.cli "${SPEC:-$root/sweeps/bert_memory.yaml}" > "$known/sweep.log" 2>&1)
  local t1; t1=$(date +%s.%N)
  grep -E "^Best:|^Stopped:" "$known/sweep.log" | cut -c1-160
  python3 - "$known/events.jsonl" "$1" "$t0" "$t1" "$OUT/headline_measured.jsonl" <<'PY'
import json, statistics, sys
path, label, t0, t1, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
ev = [json.loads(l) for l in open(path)]
start = {e["trial"]: e["t"] for e in ev if e["event"] == "start"}
told = {e["trial"]: e["t"] for e in ev if e["event"] == "told"}
order = sorted(start, key=start.get)
gaps = [start[b] - told[a] for a, b in zip(order, order[1:]) if a in told]
marks = {e["event"]: e["t"] for e in ev if e.get("trial") is None}
end = marks["exit"] - max(told.values()) if "exit" in marks and told else None
row = {"label": label, "wall_s": t1 - t0, "trials": len(start), "gaps": gaps, "end_s": end}
with open(out, "a") as fh:
    fh.write(json.dumps(row) + "\n")
print(f"{label:8s} wall {t1 - t0:5.1f} s, {len(start)} trials; between trials (result told -> next start) "
      f"median {statistics.median(gaps):.3f} s, sum {sum(gaps):.2f} s; the command's end "
      f"{'-' if end is None else f'{end:.2f}'} s after the last result", flush=True)
PY
}
one warming
for label in ${ORDER:-after before after before after before after}; do one "$label"; done
python3 - "$OUT/headline_measured.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for label in ("after", "before"):
    rs = [r for r in rows if r["label"] == label]
    if rs:
        gaps = [g for r in rs for g in r["gaps"]]
        walls = [r["wall_s"] for r in rs]
        shown = ", ".join(f"{w:.1f}" for w in walls)
        print(f"{label:8s} {len(rs)} commands: wall median {statistics.median(walls):.1f} s ({shown}), "
              f"trials {[r['trials'] for r in rs]}; between trials median {statistics.median(gaps):.3f} s over {len(gaps)}")
PY
