# The probe's sequence (see probe.py), with what the CUDA driver's JIT cache holds between processes.
set -u
cache="${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
echo "CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE-unset} CUDA_CACHE_PATH=${CUDA_CACHE_PATH-unset} CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE-unset} CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING-unset} HOME=$HOME"
size() { echo "  JIT cache: $(du -sk "$cache" 2>/dev/null | cut -f1) KiB"; }
rm -rf "$cache"; size
for run in "float16 256 _exit" "float16 256 _exit" "float16 256" "float16 256" "bfloat16 256 _exit" "bfloat16 256" "bfloat16 256"; do
  python3 docs/gpu/first_step/probe.py $run; size
done
python3 -c "import torch; print(torch.__version__, torch.cuda.get_arch_list())"
