#!/usr/bin/env bash
# A Hugging Face Trainer and an Accelerate loop on CUDA, with evaluations and checkpoints inside
# their windows (docs/gpu/session.sh trainer_tour): each trial against the script's own count (check.py).
set -u
here=$(cd "$(dirname "$0")" && pwd); d=$(mktemp -d)
cp "$here"/hf.py "$here"/hf.yaml "$here"/acc.py "$here"/acc.yaml "$d"/; cd "$d"
for spec in hf acc; do
  echo "=== $spec.yaml ($(date +%T))"
  /usr/bin/time -f "wall %e s" timeout 280 python3 -m orchestrator.cli $spec.yaml; echo "exit $?"
  python3 "$here"/check.py; du -sh out-* 2>/dev/null | head -2; rm -rf mlruns out-* own-*.log
done
rm -rf "$d"
