# Which attention backend pays the first float16/bfloat16 step's extra seconds, and does the CUDA JIT
# cache serve it from one process to the next (docs/gpu/first_step/sweeps.sh: it grew ~1.7 MiB in
# every headline command, and fresh processes after three commands still took 2.2-2.4 s)?
set -u
cache="${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
size() { echo "    JIT cache $(du -sk "$cache" 2>/dev/null | cut -f1) KiB"; }
python3 -c "import torch; print(torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'cudnn sdp', torch.backends.cuda.cudnn_sdp_enabled(), 'flash', torch.backends.cuda.flash_sdp_enabled(), 'mem-eff', torch.backends.cuda.mem_efficient_sdp_enabled())"
size
for b in "" "" FLASH_ATTENTION FLASH_ATTENTION EFFICIENT_ATTENTION EFFICIENT_ATTENTION CUDNN_ATTENTION CUDNN_ATTENTION MATH "" ""; do
  PROBE_SDPA=$b python3 docs/gpu/first_step/probe.py bfloat16 256 _exit; size
done
for d in float16 float32; do python3 docs/gpu/first_step/probe.py $d 256 _exit; size; done
