# Is a command's slow first bfloat16 step (2.0-2.8 s against 0.7-0.9 s) the CUDA driver's JIT cache?
# Two headline commands one after the other, each from an empty folder, with the cache's size
# around each, every trial's first step (warmup_1 - built) and dtype, then one probe process.
# Run through docs/gpu/session.sh's set-up (wheels, bytecode): session.sh jit.
set -u
cache="${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
root=$PWD
for i in 1 2 3; do
  d=$(mktemp -d)
  echo "== command $i: JIT cache $(du -sk "$cache" 2>/dev/null | cut -f1) KiB before; env: CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE-unset} CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING-unset}"
  (cd "$d" && timeout 200 python3 -m orchestrator.cli "$root/sweeps/bert_memory.yaml" > "$d/sweep.log" 2>&1)
  echo "   JIT cache $(du -sk "$cache" 2>/dev/null | cut -f1) KiB after"
  python3 - "$d" <<'PY'
import glob, json, sys
rows = []
for f in glob.glob(sys.argv[1] + "/**/result.json", recursive=True):
    r = json.load(open(f)); t = r.get("timeline", {}); p = json.load(open(f.replace("result.json", "config.json"))).get("params", {})
    if "warmup_1" in t and "built" in t:
        rows.append((t.get("config_received", 0), p.get("dtype"), p.get("batch_size"), p.get("grad_accum_steps"),
                     t["warmup_1"] - t["built"], "prepared" in t))
t0 = min(r[0] for r in rows) if rows else 0
for r in sorted(rows):
    print(f"   +{r[0] - t0:6.2f} s {r[1]:9s} b{r[2]} x{r[3]}: first step {r[4]:.2f} s{' (prepared)' if r[5] else ''}")
PY
done
python3 docs/gpu/first_step/probe.py bfloat16 256 _exit
python3 docs/gpu/first_step/probe.py float16 256 _exit
