# The first float16/bfloat16 step's extra seconds (docs/gpu/first_step/sweeps.sh): is the CUDA JIT
# cache keyed by the working folder? One process per line (probe.py), the cache's size after each.
#   bash docs/gpu/first_step/cwd.sh          # folders: a new one twice, another new one, the repository
#   bash docs/gpu/first_step/cwd.sh what     # the folder or PWD, and the cache switched off
#   bash docs/gpu/first_step/cwd.sh backend  # each attention backend alone, each in a new folder
#   bash docs/gpu/first_step/cwd.sh when     # the folder at `import torch` or at the first kernels?
set -u
cache="${CUDA_CACHE_PATH:-$HOME/.nv/ComputeCache}"
size() { echo "    JIT cache $(du -sk "$cache" 2>/dev/null | cut -f1) KiB"; }
root=$PWD
if [ -z "${1:-}" ]; then
a=$(mktemp -d); b=$(mktemp -d)
for where in "$a" "$a" "$b" "$root"; do
  echo "  in $where:"; (cd "$where" && python3 "$root/docs/gpu/first_step/probe.py" bfloat16 256 _exit); size
done
fi
if [ "${1:-}" = what ]; then
# The folder itself or the PWD variable a shell sets? And is it the driver's JIT cache (off: slow everywhere)?
c=$(mktemp -d); d=$(mktemp -d)
echo "  in a new folder, PWD=$root:"; (cd "$c" && PWD="$root" python3 "$root/docs/gpu/first_step/probe.py" bfloat16 256 _exit); size
echo "  in a new folder, os.chdir($root) before torch:"; (cd "$d" && python3 -c "import os, runpy, sys; os.chdir('$root'); sys.argv = ['probe.py', 'bfloat16', '256', '_exit']; runpy.run_path('$root/docs/gpu/first_step/probe.py', run_name='__main__')"); size
echo "  in $root, CUDA_CACHE_DISABLE=1:"; (cd "$root" && CUDA_CACHE_DISABLE=1 python3 "$root/docs/gpu/first_step/probe.py" bfloat16 256 _exit); size
command -v strace >/dev/null && (cd "$c" && strace -f -qq -e trace=getcwd,readlink -o /tmp/st.txt python3 "$root/docs/gpu/first_step/probe.py" float16 256 _exit; grep -c getcwd /tmp/st.txt; grep getcwd /tmp/st.txt | tail -5)
fi
if [ "${1:-}" = backend ]; then
# Which attention backend's kernels miss the cache in a new folder? Each process in a folder of its own.
for b in "" FLASH_ATTENTION EFFICIENT_ATTENTION CUDNN_ATTENTION MATH ""; do
  w=$(mktemp -d); echo "  a new folder, SDPA ${b:-default}:"
  (cd "$w" && PROBE_SDPA=$b python3 "$root/docs/gpu/first_step/probe.py" bfloat16 256 _exit); size
done
fi
if [ "${1:-}" = when ]; then
# Which moment's folder keys the cache: torch imported in one folder, the first step run in another.
run() {  # $1: folder at import, $2: folder at the first step
  python3 -c "import os, runpy, sys; os.chdir('$1'); import torch; os.chdir('$2'); sys.argv = ['probe.py', 'bfloat16', '256', '_exit']; runpy.run_path('$root/docs/gpu/first_step/probe.py', run_name='__main__')"
}
e=$(mktemp -d); f=$(mktemp -d); g=$(mktemp -d); h=$(mktemp -d)
echo "  warm the repository's entries:"; (cd "$root" && python3 "$root/docs/gpu/first_step/probe.py" bfloat16 256 _exit); size
echo "  torch imported in the repository, the step in a new folder:"; run "$root" "$e"; size
echo "  torch imported in a new folder, the step in the repository:"; run "$f" "$root"; size
echo "  both in a new folder (the control: a miss):"; run "$g" "$g"; size
echo "  again, torch imported in the repository, the step in another new folder:"; run "$root" "$h"; size
fi
