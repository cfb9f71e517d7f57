# The headline from an empty store with `trial.precision: 0.005` and `min_measure_s: 0.5` (as
# shipped) against the same spec without them (every window 10 steps and 1 s), alternating, all in one folder the machine ran from before
# (the first command warms the CUDA driver's JIT cache for that folder and is not compared:
# docs/gpu/first_step/). Per command: the wall, the trials, the answer, the windows' seconds;
# at the end, each configuration's throughput both ways (the windows' fidelity).
# ROUNDS (default 2) pairs of commands.
set -u
root=$PWD; known=$(mktemp -d); fixed=$root/sweeps/.bert_memory_fixed.yaml
grep -vE '^  (precision|min_measure_s):' "$root/sweeps/bert_memory.yaml" > "$fixed"  # 10 steps and 1 s
one() {  # $1: spec, $2: label
  rm -rf "$known/mlruns"
  local t0; t0=$(date +%s.%N)
  (cd "$known" && timeout 200 python3 -m orchestrator.cli "$1" > "$known/sweep.log" 2>&1)
  local t1; t1=$(date +%s.%N)
  grep -E "^Best:|^Stopped:" "$known/sweep.log" | cut -c1-160
  python3 - "$known" "$2" "$t0" "$t1" "$OUT/headline_precision.jsonl" <<'PY'
import glob, json, statistics, sys
folder, label, t0, t1, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
rows = []
for f in glob.glob(folder + "/mlruns/.trials/**/result.json", recursive=True):
    r = json.load(open(f)); m = r.get("metrics") or {}
    p = json.load(open(f.replace("result.json", "config.json"))).get("params", {})
    key = f"b{p.get('batch_size')} {p.get('dtype')} x{p.get('grad_accum_steps')}"
    rows.append({"label": label, "config": key, "status": r.get("status"), "samples_per_s": m.get("samples_per_s"),
                 "measure_s": m.get("measure_s"), "steps": m.get("measure_steps_done"), "ci95": m.get("throughput_ci95")})
with open(out, "a") as fh:
    for row in rows:
        fh.write(json.dumps(row) + "\n")
ok = [r for r in rows if r["measure_s"]]
window = sum(r["measure_s"] for r in ok)
print(f"{label:10s} wall {t1 - t0:5.1f} s, {len(rows)} trials ({len(ok)} measured); windows {window:5.1f} s in all, "
      f"median {statistics.median(r['measure_s'] for r in ok):.2f} s, steps {sorted(int(r['steps']) for r in ok)}", flush=True)
PY
}
one "$fixed" "warming"
for i in $(seq "${ROUNDS:-2}"); do
  one "$root/sweeps/bert_memory.yaml" "precision"
  one "$fixed" "fixed"
done
rm -f "$fixed"
python3 - "$OUT/headline_precision.jsonl" <<'PY'
import collections, json, statistics, sys
by = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["label"] != "warming" and r["samples_per_s"]:
        by[r["config"]][r["label"]].append(r["samples_per_s"])
print("configuration             precision (median, n)   fixed (median, n)   ratio")
for k, v in sorted(by.items()):
    if v["precision"] and v["fixed"]:
        a, b = statistics.median(v["precision"]), statistics.median(v["fixed"])
        print(f"{k:25s} {a:12,.1f} ({len(v['precision'])})   {b:12,.1f} ({len(v['fixed'])})   {a / b:.4f}")
PY
