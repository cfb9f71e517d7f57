#!/usr/bin/env bash
# Last session's script-tour fixes on CUDA (docs/gpu/session.sh script_tour): three batch layouts
# and torch.compile(optimizer.step), each trial against the script's own count (check.py).
set -u
here=$(cd "$(dirname "$0")" && pwd); d=$(mktemp -d)
cp "$here"/tour.py "$here"/layouts.yaml "$here"/compiled.yaml "$here"/check.py "$d"/; cd "$d"
for spec in layouts compiled; do
  echo "=== $spec.yaml ($(date +%T))"
  /usr/bin/time -f "wall %e s" timeout 500 python3 -m orchestrator.cli $spec.yaml; echo "exit $?"
  python3 check.py; rm -rf mlruns own-*.log
done
rm -rf "$d"
