# The headline from an empty store, in a new folder against a folder the machine ran from before
# (the CUDA driver's JIT cache is keyed by the working folder: docs/gpu/first_step/cwd.sh). Five
# commands: the known folder's first run (a new folder then), then known and new alternating.
# Per command: the wall, the trials, and the first step of its first float16 and bfloat16 trials.
set -u
root=$PWD; known=$(mktemp -d)
one() {  # $1: folder, $2: label
  rm -rf "$1/mlruns"
  local t0; t0=$(date +%s.%N)
  (cd "$1" && timeout 200 python3 -m orchestrator.cli "$root/sweeps/bert_memory.yaml" > "$1/sweep.log" 2>&1)
  python3 - "$1" "$2" "$t0" "$(date +%s.%N)" <<'PY'
import glob, json, sys
rows = []
for f in glob.glob(sys.argv[1] + "/mlruns/.trials/**/result.json", recursive=True):
    r = json.load(open(f)); t = r.get("timeline", {}); p = json.load(open(f.replace("result.json", "config.json"))).get("params", {})
    if "warmup_1" in t and "built" in t:
        rows.append((t.get("config_received", 0), p.get("dtype"), t["warmup_1"] - t["built"]))
rows.sort()
first, later = {}, []
for _, dtype, s in rows:
    if dtype in first:
        later.append(s)
    first.setdefault(dtype, s)
later.sort()
print(f"{sys.argv[2]:28s} wall {float(sys.argv[4]) - float(sys.argv[3]):5.1f} s, {len(rows)} trials; first step of the first "
      + ", ".join(f"{d} {s:.2f} s" for d, s in first.items())
      + f"; the others' median {later[len(later) // 2] if later else float('nan'):.2f} s", flush=True)
PY
}
one "$known" "known folder, its first run"
for i in 1 2; do
  one "$known" "known folder"
  one "$(mktemp -d)" "new folder"
done
