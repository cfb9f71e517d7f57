#!/usr/bin/env bash
# Why a Python import is slow on the lent GPU host: bytecode caches, the CPU's single-thread speed,
# and the imports the orchestrator and a trial pay (issue #40 item 3); run as `bash docs/gpu/imports_probe.sh`.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONWARNINGS=ignore
t() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; python3 -c "import time,sys; print(f'{time.time()-float(sys.argv[1]):.2f} s', *sys.argv[2:])" "$s" "$*"; }
python3 -c "import sys; print(sys.version, sys.flags.dont_write_bytecode)"; env | grep -i ^PYTHON
TD=$(python3 -c "import importlib.util,os; print(os.path.dirname(importlib.util.find_spec('torch').origin))")
echo "torch at $TD; writable: $(test -w "$TD" && echo yes || echo no); pyc files: $(find "$TD" -name '*.pyc' | wc -l); py files: $(find "$TD" -name '*.py' | wc -l)"
echo "mlflow pyc before: $(find /tmp/site/mlflow -name '*.pyc' | wc -l)"
python3 -c "import time; t=time.perf_counter(); s=0
for i in range(10_000_000): s+=i
print(f'python loop 10M: {time.perf_counter()-t:.2f} s')"
for i in 1 2 3; do t python3 -c "import torch"; done
for i in 1 2; do t python3 -c "import torch, torch._dynamo"; done
for i in 1 2 3; do t python3 -c "import mlflow, optuna"; done
echo "mlflow pyc after: $(find /tmp/site/mlflow -name '*.pyc' | wc -l)"
export PYTHONPYCACHEPREFIX=/tmp/pycache
for i in 1 2 3; do t python3 -c "import torch, torch._dynamo"; done
for i in 1 2; do t python3 -c "import mlflow, optuna"; done
unset PYTHONPYCACHEPREFIX
python3 -X importtime -c "import torch" 2>&1 | sort -t'|' -k2 -n | tail -8
df -h / /tmp "$TD" | cat; mount | grep -E " / | /tmp " | head
# the same imports once torch and the carried wheels have their bytecode, as a pip install leaves them
# (pip compiles every module on install; the lent image ships torch without it and sets PYTHONDONTWRITEBYTECODE)
if [ "${COMPILE:-1}" = 1 ]; then
  unset PYTHONDONTWRITEBYTECODE
  t python3 -m compileall -q -j 16 "$TD/.." /tmp/site
  echo "torch pyc files now: $(find "$TD" -name '*.pyc' | wc -l)"
  for i in 1 2 3; do t python3 -c "import torch"; done
  for i in 1 2; do t python3 -c "import torch, torch._dynamo"; done
  for i in 1 2 3; do t python3 -c "import mlflow, optuna"; done
  t python3 -c "import experiments.bert, torch._dynamo, torch.optim"
  t python3 -c "import transformers, torch._dynamo"
fi
