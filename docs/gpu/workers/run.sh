#!/usr/bin/env bash
# Last session's launcher changes, on CUDA (docs/gpu/session.sh workers): a script's DataLoader
# workers and its own child under each way a trial ends, SIGTERM mid-trial, then the same command.
# Prints what each command printed, the trials' statuses, and what was left: processes and
# multiprocessing's pymp-* folders in the sweep's temp folder.
set -u
here=$(cd "$(dirname "$0")" && pwd); d=$(mktemp -d); tmp=$(mktemp -d /tmp/tXXXX)
cp "$here"/faulty.py "$here"/faulty.yaml "$here"/interrupt.yaml "$d"/
cd "$d"; sed -i "s/^device: cuda/device: ${DEVICE:-cuda}/" faulty.yaml interrupt.yaml
left() {
  echo "left in TMPDIR: $(ls "$tmp" | grep -v '^torchinductor_' | tr '\n' ' ')"
  echo "processes left: $(pgrep -f 'faulty.py|child-of-a-trial|sleep 600' | tr '\n' ' ')"
}
statuses() {
  python3 - "$1" <<'PY'
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
s = optuna.load_study(study_name=sys.argv[1], storage="sqlite:///mlruns/optuna.db")
for t in s.trials:
    print(f"  trial {t.number} {t.params} state={t.state.name} status={t.user_attrs.get('status')} detail={(t.user_attrs.get('detail') or '')[:160]!r}")
PY
}
echo "=== each way a script ends ($(date +%T))"
TMPDIR=$tmp timeout 300 python3 -m orchestrator.cli faulty.yaml; echo "exit $?"
statuses faulty_cuda; left
echo "logs naming the SIGCHLD raise: $(grep -l 'a child of the script died' mlruns/.trials/faulty_cuda-*/trial-*/trial.log 2>/dev/null | wc -l)"
echo "=== SIGTERM (a scheduler's stop; a background job ignores SIGINT) 3 s into the first trial's log ($(date +%T))"
TMPDIR=$tmp python3 -m orchestrator.cli interrupt.yaml > interrupt.out 2> interrupt.err & pid=$!
for i in $(seq 1 600); do
  grep -qs "starting workers" mlruns/.trials/interrupt_cuda-*/trial-*/trial.log && break; sleep 0.1
done
sleep 3; kill -TERM $pid; wait $pid; echo "exit $?"; cat interrupt.out; tail -3 interrupt.err
statuses interrupt_cuda; sleep 1; left
echo "=== the same command again ($(date +%T))"
TMPDIR=$tmp timeout 300 python3 -m orchestrator.cli interrupt.yaml; echo "exit $?"
statuses interrupt_cuda; left
rm -rf "$d" "$tmp"
