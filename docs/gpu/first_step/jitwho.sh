# Which call of a BERT-base first step waits for the driver's JIT: torch's profiler, a new folder then the same
# folder again, bfloat16 then float16 (bash docs/gpu/first_step/jitwho.sh from the repository root; 2026-11-27 14:26)
R=$PWD
for dtype in bfloat16 float16; do
  d=$(mktemp -d); cd $d
  du -sk ~/.nv/ComputeCache 2>/dev/null
  python3 $R/docs/gpu/first_step/jitwho.py $R $dtype 2>&1 | grep -v Warning
  du -sk ~/.nv/ComputeCache 2>/dev/null
  python3 $R/docs/gpu/first_step/jitwho.py $R $dtype 2>&1 | grep -v Warning | head -4
  cd $R
done
