#!/usr/bin/env bash
# The GPU runs behind the README's figures, as they were run with the `device` tool on a lent
# 2-GPU H200 host (torch 2.11 CUDA there; optuna, mlflow and their needs carried as wheels in
# .whl/; the "before" code, commit 6e081e8, copied into .before/).
#   bash docs/gpu/session.sh a    overhead before/after (bench/overhead.py)
#   bash docs/gpu/session.sh a2   overhead of this checkout alone
#   bash docs/gpu/session.sh f    the fork server against per-trial interpreters (commit 50cca09's
#                                 orchestrator/ and experiments/ copied into .spares/)
#   bash docs/gpu/session.sh b    fidelity, doctor, doctor --check, CPU against CUDA
#   bash docs/gpu/session.sh c    BERT-base on one GPU against both (bench/devices.py)
#   bash docs/gpu/session.sh d    the same, two alternating rounds each way, with the control line
#   bash docs/gpu/session.sh g    the fork server against per-trial interpreters (as f, shorter), then
#                                 fidelity with the fork server: the MLP grid and BERT-base at batch 64
#   bash docs/gpu/session.sh h    fidelity with the fork server, BERT-base at batch 64, 4 rounds
#   bash docs/gpu/session.sh r    one GPU against both, each configuration the median of 3 processes
#                                 (not run yet: about 9 minutes on 2 x H200; no 2-GPU host lent since)
#   bash docs/gpu/session.sh p    fork servers started at start-up against the version before them
#                                 (commit 08615a3's orchestrator/ and experiments/ copied into
#                                 .before_prewarm/: git archive 08615a3 orchestrator experiments |
#                                 tar -x -C .before_prewarm), 2 alternating rounds; run on an H100
#                                 (docs/gpu/prewarm/)
#   bash docs/gpu/session.sh i    fork_vs_fresh --interleave, pairs of processes each way, batch 512
#                                 and 64, on 2 of the host's cores; run on an H100 (docs/gpu/fork/interleave_*)
#   bash docs/gpu/session.sh s    a trial's start-up phase by phase (bench/startup.py, issue #20 item 4):
#                                 BERT-base, seq_len 128, batch 64, bfloat16, the headline's trial
#                                 settings (warmup_steps 3, measure_steps 10, min_measure_s 1.0), 8
#                                 alternating rounds of: the code before (commit 3bfde10, into
#                                 .before_startup/), the same with the start-up marks only (commit
#                                 3d4ec97: per-phase figures of the old build on the CPU + copy, into
#                                 .startup_marks/), and this checkout (parameters built on the GPU):
#                                   for c in 3bfde10:.before_startup 3d4ec97:.startup_marks; do rm -rf ${c#*:};
#                                   mkdir ${c#*:}; git archive ${c%:*} orchestrator experiments | tar -x -C ${c#*:}; done
#                                 not run yet (about 2.5 minutes of an H100 expected)
#   bash docs/gpu/session.sh t    time to answer on an H100: a trial's start-up phase by phase against
#                                 3bfde10's (copied into .before_startup/), the headline from an empty
#                                 store, the finished study's command, best and report against import
#                                 torch, and the BERT-base 512-token landscape
#   bash docs/gpu/session.sh u    the MLP and small-BERT landscapes
#   bash docs/gpu/session.sh v    the BERT-base landscape with accumulation
#   bash docs/gpu/session.sh w    the final check: the BERT-large landscape with accumulation, recorded
#                                 after the last change to the search, then the headline again
#   bash docs/gpu/session.sh y    issue #27's landscapes that contradict the priors: a narrow MLP (float32
#                                 expected fastest), a deep MLP under a cap (checkpointing expected to win)
#                                 and a wide MLP (accumulation expected to win)
#   bash docs/gpu/session.sh z1   issue #27: the deep MLP at a tighter cap (checkpointing expected to win)
#   bash docs/gpu/session.sh z2   issue #27: two more checkpointing landscapes, a 32-layer MLP at caps of
#                                 2.2% and 1.8%, to judge search changes on more than one (about 4 minutes)
#   bash docs/gpu/session.sh z3   two landscapes recorded after every search change of the session that resolved
#                                 issue #27, never tuned on: a 16-layer MLP of 2,048 capped at 3% and the small
#                                 BERT at 128 tokens (about 4 minutes on an H100)
#   bash docs/gpu/session.sh z    issue #27's final check, after the search changed: the headline from an empty
#                                 folder and again, and the launch-bound MLP spec (float32 fastest) run for real
#   bash docs/gpu/session.sh x    issue #30: experiments.hf's BERT-base (transformers' BertForMaskedLM
#                                 from its config) against experiments.bert through the harness, 3
#                                 alternating rounds of float32 b64 and bfloat16 b128
#                                 (bench/hf_vs_bert.py), then GPT-2 small (sweeps/hf_causal_lm.yaml)
#                                 swept end to end with the auto search from an empty folder, and its
#                                 report (about 4 minutes of an H100; needs transformers 5.x in .whl/)
#   bash docs/gpu/session.sh f1   seconds to the first trial (issue #29): the headline from an empty
#                                 folder, mark by mark (bench/first_trial.py), 3 rounds against
#                                 import torch, after one untimed run; about 5 minutes on an H100
#   bash docs/gpu/session.sh m2   issue #31: the headline on both GPUs of a 2-GPU host (--devices cuda:0,cuda:1)
#                                 against cuda:0 alone, each from an empty folder, alternating, twice each
#                                 (bench/devices.py); about 5 minutes on 2 x H100
#   bash docs/gpu/session.sh s37  issue #37: experiments.bert as a module against the same model and batches in a
#                                 plain loop swept as a script (bench/script_vs_module.py: 3 points, 3 alternating
#                                 rounds, then the hooks' cost, 4 bare/hooked pairs), then scripts swept end to end
#                                 on CUDA: the BERT loop under a 15% cap (auto search), the Hugging Face Trainer and
#                                 the Lightning examples (about 6 minutes on an H100)
#   bash docs/gpu/session.sh n38  issue #38: the headline (bert_memory.yaml, auto search, trial.repeats: auto)
#                                 from an empty folder twice, each in its own folder, then report: the
#                                 throughput_ci95 of a quiet H100 (expected under the 2% band: no Noise line),
#                                 how often the search measures again there and whether both runs answer alike;
#                                 then bench/noise.py --no-load on the host's CPU (about 4 minutes)
#   bash docs/gpu/session.sh f2   the same, 2 rounds, side by side with the code before (main's
#                                 orchestrator/ and experiments/ copied into .before_first_trial/:
#                                 git archive main orchestrator experiments | tar -x -C .before_first_trial);
#                                 about 7 minutes
#   bash docs/gpu/session.sh m40  issue #40: the headline from an empty store in a known folder, this checkout (the next
#                                 trial's process prepared once a window is over) alternating with .before40/ (4c91f18:
#                                 prepared at the result), 4 and 3 commands after a warming one, with the gaps between
#                                 trials (docs/gpu/window/headline_measured.sh; about 7 minutes on an H100)
#   bash docs/gpu/session.sh c40  issue #40 on one H100 (nvidia-h100-x1), about 8 minutes, everything printed in
#                                 one go: the import floor (import torch three times; the slowest imports of
#                                 torch and torch._dynamo), bench/trial_cost.py's table from empty folders
#                                 (the headline, the 153M Llama at 1024 tokens under a 15% cap, the compile row,
#                                 the launch-bound MLP) against the code before this branch, copied into
#                                 .before40/ first (its merge base with main, 3ff9fad):
#                                   rm -rf .before40; mkdir .before40; git archive 3ff9fad orchestrator experiments | tar -x -C .before40
#                                 then bench/fidelity.py --overlap (prepared processes against forked ones) on
#                                 BERT-base at batch 64 and on the launch-bound MLP
#   bash docs/gpu/session.sh f40  issue #40 item 2 with torch's bytecode: fidelity of the prepared process, BERT-base
#                                 (8 rounds, 3-s windows) and the launch-bound MLP (6 rounds; about 6 minutes)
#   bash docs/gpu/session.sh d41  issue #41 items 2-3 on 4 x H100 (nvidia-h100-x4), about 6 minutes: the headline on
#                                 1, 2 and 4 GPUs, each from an empty folder, the order rotated, twice each
#                                 (bench/devices.py), with what ran beside each configuration's window on the
#                                 other slots, each slot's first trial and the command's end
#                                 (D41_MANY="--many auto" D41_ROUNDS=3: one GPU against four only, 3 rounds)
#   bash docs/gpu/session.sh ab54 this session's code against a838bd7's (in .before_s54/), one GPU against all,
#                                 alternating, AB_ROUNDS pairs (default 2; docs/gpu/devices41/x2_h200_s54/)
#   bash docs/gpu/session.sh gate41 the slot's next process prepared beside other slots' windows (pinned slots) against
#                                 the gate as it was (47207df's orchestrator/, experiments/ and bench/ copied into
#                                 .before_gate/: git archive 47207df orchestrator experiments bench | tar -x -C
#                                 .before_gate), one GPU against four, alternating, 2 rounds each (about 6 minutes)
#   bash docs/gpu/session.sh early41 a slot's next process forked as its trial starts, its driver alone (f781bf0) against
#                                 the window-end prepare before it (9559488's orchestrator/, experiments/ and bench/ in
#                                 .before_early/: git archive 9559488 orchestrator experiments bench | tar -x -C
#                                 .before_early), one GPU against all, alternating, E41_ROUNDS pairs (default 2);
#                                 then python3 docs/gpu/early/contexts.py on the JSON files
#   bash docs/gpu/session.sh s37b issue #37 again: the module against the script on CUDA with 3-s windows and 4
#                                 alternating rounds, the hooks' cost with the time inside them, then the same
#                                 comparison on the host's CPU (the tiny BERT; about 8 minutes on an H100)
#   bash docs/gpu/session.sh l41a issue #41's new landscapes, part 1: a Hugging Face decoder (GPT-2 small, 512 tokens)
#                                 under a 12% cap and a Hugging Face encoder (BERT-base masked LM), each a full grid
#                                 (about 7 minutes on an H100)
#   bash docs/gpu/session.sh lhead the headline's own space (sweeps/landscape_headline_cuda.yaml: batch x precision x
#                                 accumulation, uncapped, its warm-up and window), a full grid (about 5 minutes on an H100)
#   bash docs/gpu/session.sh l41b part 2, the compile landscapes: the small BERT and a 153M Llama under a 10% cap,
#                                 each with compile as a dimension (about 9 minutes on an H100)
#   bash docs/gpu/session.sh jit  three headline commands in a row: each trial's first step and the CUDA JIT cache
#                                 (docs/gpu/first_step/sweeps.sh); sdpa: the same first step with each attention
#                                 backend alone, one process each (docs/gpu/first_step/sdpa.sh); cwd: the same
#                                 first step in new and known working folders (CWD_PART=what: what of the folder; CWD_PART=when: at import or at the first kernels)
#   bash docs/gpu/session.sh folders the headline from an empty store in a folder run from before against a new
#                                 folder, alternating (docs/gpu/first_step/headline_folders.sh; about 5 minutes)
#   bash docs/gpu/session.sh window  the headline with trial.precision (as shipped) against without, alternating
#                                 in one known folder (ROUNDS pairs, default 2; docs/gpu/window/)
#   bash docs/gpu/session.sh ahead issue #40, tried and not kept: a lone slot's next process prepared at its trial's
#                                 start and warmed (backend.warm_kernels; apply docs/gpu/ahead/warm_ahead.patch to
#                                 764bd0d first), against 764bd0d (git archive of its orchestrator/ and experiments/
#                                 into .before_ahead/), bench/overhead.py on the headline, 2 rounds; ahead2: the
#                                 fidelity of a window beside that process (bench/fidelity.py --overlap)
#   bash docs/gpu/session.sh cpu41 the small BERT with compile, auto search, one GPU against all (bench/devices.py), each
#                                 several-GPU window's host_cpu_others beside its ratio (about 3 minutes on 4 x H100)
#   bash docs/gpu/session.sh probe41c issue #41 item 3: what slows a launch-bound eager trial while other GPUs'
#                                 trials compile: docs/gpu/compile_beside_probe.py (about 3 minutes on 4 x H100)
#   bash docs/gpu/session.sh workers  a script's DataLoader workers and its own child, on CUDA, under each way a
#                                 trial ends, then SIGTERM mid-trial and the same command again
#                                 (docs/gpu/workers/run.sh), with the fork server and with ORCHESTRATE_FORK=0
#   bash docs/gpu/session.sh headline  the headline from an empty folder, then report --plots, best and check
#   bash docs/gpu/session.sh script_tour  the script tour's fixes on CUDA: three batch layouts and
#                                 torch.compile(optimizer.step), each trial against the script's own
#                                 count (docs/gpu/script_tour/run.sh)
#   bash docs/gpu/session.sh trainer_tour  a Hugging Face Trainer and an Accelerate loop with evaluations and
#                                 checkpoints inside their windows, against their own count (docs/gpu/trainer_tour/run.sh)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export PATH=/tmp/site/bin:$PATH
# Bytecode, as a pip install leaves it (pip compiles every module it installs). The lent image ships
# torch without any .pyc and sets PYTHONDONTWRITEBYTECODE=1, so every process there compiled torch's
# modules again: import torch 4-7 s against 1.8-2.4 s with the bytecode (docs/gpu/imports/). Runs
# before this line measured the image as shipped; PYC=0 still does.
if [ "${PYC:-1}" = 1 ]; then
  unset PYTHONDONTWRITEBYTECODE
  python3 -m compileall -q -j 16 "$(python3 -c 'import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec("torch").origin)))')" /tmp/site >/dev/null 2>&1
fi
ORCH="python3 -m orchestrator.cli"
step() { echo "=== $1 ($(date +%T))"; }
landscape() {  # record sweeps/landscape_$1_cuda.yaml in an empty folder, export it as $OUT/$2.csv
  step "landscape $1"; local d; d=$(mktemp -d)
  (cd "$d" && time timeout "${LT:-280}" $ORCH "$OLDPWD/sweeps/landscape_$1_cuda.yaml") > "$OUT/landscape_$1.log" 2>&1
  python3 bench/export_landscape.py "sqlite:///$d/mlruns/optuna.db" "landscape_$1_cuda" "$OUT/$2.csv" >> "$OUT/landscape_$1.log" 2>&1
}
{ nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv; nproc; python3 -c "import torch; print(torch.__version__)"; nvidia-smi topo -m; lscpu | grep -E "NUMA|Thread|Socket|Model name"; } > "$OUT/machine.txt" 2>&1
case "${1:-a}" in
a)
  step overhead; rm -rf /tmp/before && cp -r .before /tmp/before; timeout 560 python3 bench/overhead.py --device cuda --compare /tmp/before --trials 4 --floor-repeats 3 \
      --json "$OUT/overhead.json" > "$OUT/overhead.log" 2>&1
  ;;
a2)  # this checkout only, after a change (the "before" column is in a's log)
  step overhead; timeout 400 python3 bench/overhead.py --device cuda --trials 6 --floor-repeats 3 \
      --json "$OUT/overhead_after.json" > "$OUT/overhead_after.log" 2>&1
  ;;
f)
  step overhead; rm -rf /tmp/spares && cp -r .spares /tmp/spares; timeout 560 python3 bench/overhead.py --device cuda --compare /tmp/spares --trials 6 --floor-repeats 3 \
      --json "$OUT/overhead_fork.json" > "$OUT/overhead_fork.log" 2>&1
  ;;
b)
  step fidelity; timeout 200 python3 bench/fidelity.py --device cuda --rounds 3 --configs 4 > "$OUT/fidelity.log" 2>&1
  step doctor; (cd /tmp && time $ORCH doctor) > "$OUT/doctor.log" 2>&1; (cd /tmp && $ORCH doctor --format json) > "$OUT/doctor.json" 2>&1
  step check; (cd /tmp && time timeout 150 $ORCH doctor --check) > "$OUT/doctor_check.log" 2>&1
  step compare; d=$(mktemp -d); (cd "$d" && timeout 120 $ORCH "$OLDPWD/sweeps/device_compare.yaml" && $ORCH report "$OLDPWD/sweeps/device_compare.yaml" --out "$OUT/compare" && $ORCH best "$OLDPWD/sweeps/device_compare.yaml") > "$OUT/device_compare.log" 2>&1
  ;;
c)
  step devices; timeout 560 python3 bench/devices.py sweeps/bert_base_devices.yaml --one cuda:0 --many auto \
      --logs "$OUT/devices" --json "$OUT/devices.json" > "$OUT/devices.log" 2>&1
  ;;
d)
  step devices; timeout 570 python3 bench/devices.py sweeps/bert_base_devices.yaml --one cuda:0 --many auto \
      --rounds 2 --logs "$OUT/devices" --json "$OUT/devices.json" > "$OUT/devices.log" 2>&1
  ;;
g)
  step overhead; rm -rf /tmp/spares && cp -r .spares /tmp/spares; timeout 330 python3 bench/overhead.py --device cuda --compare /tmp/spares --trials 6 --floor-repeats 3 \
      --json "$OUT/overhead_fork.json" > "$OUT/overhead_fork.log" 2>&1
  step fidelity; timeout 120 python3 bench/fidelity.py --device cuda --rounds 3 --configs 4 > "$OUT/fidelity_mlp.log" 2>&1
  step fidelity-bert; timeout 130 python3 bench/fidelity.py --device cuda --rounds 3 --spec sweeps/bert_base_devices.yaml \
      --only batch_size=64 --only activation_checkpointing=False > "$OUT/fidelity_bert.log" 2>&1
  ;;
h)
  step fidelity-bert; timeout 330 python3 bench/fidelity.py --device cuda --rounds 4 --spec sweeps/bert_base_devices.yaml \
      --only batch_size=64 --only activation_checkpointing=False > "$OUT/fidelity_bert.log" 2>&1
  ;;
r)
  step devices; timeout 570 python3 bench/devices.py sweeps/bert_base_devices.yaml --one cuda:0 --many auto \
      --repeats 3 --logs "$OUT/devices" --json "$OUT/devices.json" > "$OUT/devices.log" 2>&1
  ;;
p)
  step overhead; rm -rf /tmp/before_prewarm && cp -r .before_prewarm /tmp/before_prewarm
  timeout 560 python3 bench/overhead.py --device cuda --compare /tmp/before_prewarm --rounds 2 --trials 6 \
      --floor-repeats 3 --json "$OUT/overhead_prewarm.json" > "$OUT/overhead_prewarm.log" 2>&1
  ;;
i)  # pairs of processes each way (fresh+forked, and fresh+fresh as the control), on 2 of the host's cores
  step interleave-b512; timeout 300 taskset -c 2,3 python3 bench/fork_vs_fresh.py --interleave 100 --process-pairs 11 \
      --batch 512 --steps 10 > "$OUT/interleave_b512.log" 2>&1
  step interleave-b64; timeout 250 taskset -c 2,3 python3 bench/fork_vs_fresh.py --interleave 60 --process-pairs 8 \
      > "$OUT/interleave_b64.log" 2>&1
  for f in "$OUT"/interleave_*.log; do python3 bench/fork_vs_fresh.py --from-log "$f"; done > "$OUT/summary.log"
  ;;
s)  # the labels are the folders' names: before_startup, startup_marks, this checkout
  step startup; for d in before_startup startup_marks; do rm -rf /tmp/$d && cp -r .$d /tmp/$d; done
  timeout 230 python3 bench/startup.py --device cuda --spec sweeps/bert_base_devices.yaml --only batch_size=64 \
      --only dtype=bfloat16 --only activation_checkpointing=False --trials 8 \
      --compare /tmp/before_startup --compare /tmp/startup_marks --json "$OUT/startup.json" > "$OUT/startup.log" 2>&1
  ;;
t)
  step startup; rm -rf /tmp/before_startup && cp -r .before_startup /tmp/before_startup
  timeout 200 python3 bench/startup.py --device cuda --spec sweeps/bert_base_devices.yaml --only batch_size=64 \
      --only dtype=bfloat16 --only activation_checkpointing=False --trials 6 --compare /tmp/before_startup \
      --json "$OUT/startup.json" > "$OUT/startup.log" 2>&1
  step headline; R=$PWD; d=$(mktemp -d); cd "$d"
  { time timeout 300 $ORCH "$R/sweeps/bert_memory.yaml"; } > "$OUT/headline.log" 2>&1
  cp "$R/sweeps/bert_memory.yaml" spec.yaml; cd "$R"
  step again; timeout 150 python3 bench/commands.py --project "$d" --rounds 5 --json "$OUT/commands.json" > "$OUT/commands.log" 2>&1
  landscape bert_base_seq512 bert_base_seq512_h100_cap025
  ;;
u)
  landscape mlp mlp_h100_cap006; landscape bert_mini_seq512 bert_mini_seq512_h100_cap010
  ;;
v)
  landscape bert_base_accum bert_base_accum_h100_cap020
  ;;
w)
  landscape bert_large_accum bert_large_accum_h100_cap015
  step headline; R=$PWD; d=$(mktemp -d); cd "$d"
  { time timeout 300 $ORCH "$R/sweeps/bert_memory.yaml"; } > "$OUT/headline_final.log" 2>&1
  { time $ORCH "$R/sweeps/bert_memory.yaml"; } >> "$OUT/headline_final.log" 2>&1; cd "$R"
  ;;
y)
  landscape mlp_narrow mlp_narrow_h100; landscape mlp_deep_ckpt mlp_deep_ckpt_h100_cap003
  landscape mlp_wide_accum mlp_wide_accum_h100_cap008
  ;;
z1)
  landscape mlp_deep_ckpt_tight mlp_deep_ckpt_tight_h100_cap0017
  ;;
z2)
  landscape mlp_deep32_ckpt_cap022 mlp_deep32_ckpt_h100_cap022
  landscape mlp_deep32_ckpt_cap018 mlp_deep32_ckpt_h100_cap018
  ;;
z3)
  landscape mlp_wide16_ckpt mlp_wide16_ckpt_h100_cap003
  landscape bert_mini_seq128 bert_mini_seq128_h100
  ;;
z)
  step headline; R=$PWD; d=$(mktemp -d); cd "$d"
  { time timeout 300 $ORCH "$R/sweeps/bert_memory.yaml"; } > "$OUT/headline.log" 2>&1
  { time $ORCH "$R/sweeps/bert_memory.yaml"; } >> "$OUT/headline.log" 2>&1; cd "$R"
  step launch-bound; d=$(mktemp -d); cd "$d"
  { time timeout 200 $ORCH "$R/sweeps/mlp_launch_bound.yaml"; } > "$OUT/launch_bound.log" 2>&1; cd "$R"
  ;;
x)
  export HF_HUB_OFFLINE=1  # nothing outside the machine: configs are built, never downloaded
  python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" \
      > "$OUT/hf_versions.log" 2>&1
  step hf-vs-bert; timeout 120 python3 bench/hf_vs_bert.py --device cuda --rounds 3 \
      --json "$OUT/hf_vs_bert.json" > "$OUT/hf_vs_bert.log" 2>&1
  step hf-causal-lm; R=$PWD; d=$(mktemp -d); cd "$d"
  { time timeout 130 $ORCH "$R/sweeps/hf_causal_lm.yaml" --n-trials 12; } > "$OUT/hf_causal_lm.log" 2>&1
  $ORCH report "$R/sweeps/hf_causal_lm.yaml" > "$OUT/hf_causal_lm_report.log" 2>&1; cd "$R"
  ;;
f1)
  step first_trial; timeout 590 python3 bench/first_trial.py --spec sweeps/bert_memory.yaml --rounds 3 \
      --json "$OUT/first_trial.json" > "$OUT/first_trial.log" 2>&1
  ;;
f2)
  step first_trial; rm -rf /tmp/before && cp -r .before_first_trial /tmp/before
  timeout 590 python3 bench/first_trial.py --spec sweeps/bert_memory.yaml --rounds 2 --compare /tmp/before \
      --json "$OUT/first_trial_compare.json" > "$OUT/first_trial_compare.log" 2>&1
  ;;
m2)
  step warm; python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(2)]" > "$OUT/warm.log" 2>&1
  step two-gpus; timeout 580 python3 bench/devices.py sweeps/bert_memory.yaml --one cuda:0 --many cuda:0,cuda:1 \
      --rounds 2 --logs "$OUT/two_gpus" --json "$OUT/two_gpus.json" > "$OUT/two_gpus.log" 2>&1
  ;;
s37)
  export HF_HUB_OFFLINE=1  # nothing outside the machine: configs are built, never downloaded
  step script-vs-module; timeout 330 python3 bench/script_vs_module.py --device "${DEV:-cuda}" ${S37_ARGS:-} \
      --json "$OUT/script_vs_module.json" > "$OUT/script_vs_module.log" 2>&1
  step script-sweeps; R=$PWD; d=$(mktemp -d); cd "$d"
  { time timeout 120 $ORCH "$R/bench/scripts/bert_loop_cuda.yaml" ${S37_SWEEP_ARGS:-}; $ORCH best "$R/bench/scripts/bert_loop_cuda.yaml"; } \
      > "$OUT/script_bert_loop.log" 2>&1
  for ex in hf_trainer lightning; do
    sed -e 's/^device: cpu/device: cuda/' -e 's/"--use_cpu", "true", //' "$R/examples/scripts/$ex.yaml" > "$R/examples/scripts/${ex}_cuda.yaml"
    { time timeout 90 $ORCH "$R/examples/scripts/${ex}_cuda.yaml"; } > "$OUT/script_${ex}.log" 2>&1
    rm -f "$R/examples/scripts/${ex}_cuda.yaml"
  done
  cd "$R"
  ;;
c40)
  export HF_HUB_OFFLINE=1  # nothing outside the machine: configs are built, never downloaded
  step imports; { TIMEFORMAT="import torch %R s"; for i in 1 2 3; do time python3 -c "import torch"; done
    python3 -X importtime -c "import torch, torch._dynamo" 2>&1 | sort -t'|' -k2 -n -r | head -12; } > "$OUT/imports.log" 2>&1
  step trial-cost; rm -rf /tmp/before && cp -r .before40 /tmp/before
  timeout 400 python3 bench/trial_cost.py --compare /tmp/before --rows headline,hf_llama,compile,mlp \
      --json "$OUT/trial_cost.json" > "$OUT/trial_cost.log" 2>&1
  step fidelity-overlap; timeout 80 python3 bench/fidelity.py --device cuda --overlap --rounds 4 --configs 1 \
      --spec sweeps/bert_base_devices.yaml --only batch_size=64 --only dtype=bfloat16 \
      --only activation_checkpointing=False > "$OUT/fidelity_overlap_bert.log" 2>&1
  timeout 55 python3 bench/fidelity.py --device cuda --overlap --rounds 2 --configs 2 --min-measure-s 1.0 \
      --spec sweeps/mlp_launch_bound.yaml > "$OUT/fidelity_overlap_mlp.log" 2>&1
  ;;
f40)  # issue #40 item 2 again, with torch's bytecode: the prepared process against the forked one, longer windows
  step fidelity-overlap-bert; timeout 200 python3 bench/fidelity.py --device cuda --overlap --rounds 8 --configs 1 \
      --min-measure-s 3 --spec sweeps/bert_base_devices.yaml --only batch_size=64 --only dtype=bfloat16 \
      --only activation_checkpointing=False > "$OUT/fidelity_overlap_bert.log" 2>&1
  step fidelity-overlap-mlp; timeout 150 python3 bench/fidelity.py --device cuda --overlap --rounds 6 --configs 2 \
      --min-measure-s 2 --spec sweeps/mlp_launch_bound.yaml > "$OUT/fidelity_overlap_mlp.log" 2>&1
  ;;
ab54)  # this session's code against its start (a838bd7's orchestrator/, experiments/ and bench/ in .before_s54/:
  # git archive a838bd7 orchestrator experiments bench | tar -x -C .before_s54), one GPU against all, alternating
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  for r in $(seq 1 "${AB_ROUNDS:-2}"); do
    order=".before_s54:before .:after"; [ $((r % 2)) -eq 0 ] && order=".:after .before_s54:before"
    for w in $order; do
      step "${w#*:} $r"; timeout 200 python3 "${w%%:*}/bench/devices.py" sweeps/bert_memory.yaml --one cuda:0 --many auto \
          --rounds 1 --json "$OUT/${w#*:}_$r.json" > "$OUT/${w#*:}_$r.log" 2>&1
    done
  done
  ;;
d41)
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  step devices; timeout 560 python3 bench/devices.py sweeps/bert_memory.yaml --one cuda:0 ${D41_MANY:---many cuda:0,cuda:1 --many auto} \
      --rounds ${D41_ROUNDS:-2} --json "$OUT/devices.json" > "$OUT/devices.log" 2>&1
  ;;
cpu41)
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  for r in $(seq 1 "${C41_ROUNDS:-2}"); do
    step "round $r"; timeout 280 python3 bench/devices.py docs/gpu/beside/bert_mini_compile_auto.yaml --one cuda:0 --many auto \
        --json "$OUT/cpu_$r.json" > "$OUT/cpu_$r.log" 2>&1
  done
  ;;
probe41c)
  step compile-beside; timeout 500 python3 docs/gpu/compile_beside_probe.py --rounds "${P41_ROUNDS:-2}" ${P41_PHASES:+--phases "$P41_PHASES"} \
      > "$OUT/compile_beside${P41_PHASES:+_phases}.log" 2>&1
  lscpu > "$OUT/lscpu.txt" 2>&1; cat /proc/cpuinfo | grep -m3 MHz >> "$OUT/lscpu.txt"; ls /sys/devices/system/cpu/cpu0/cpufreq >> "$OUT/lscpu.txt" 2>&1
  ;;
beside41)  # the small BERT with compile, auto search: one GPU against all, with flight.beside (this
  # checkout) and without (commit 58f88b4's parent, d284017: git archive d284017 bench orchestrator
  # experiments | tar -x -C .before_beside), alternating
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  spec=docs/gpu/beside/bert_mini_compile_auto.yaml
  for r in $(seq 1 "${B41_ROUNDS:-1}"); do for w in .before_beside:before .:after; do
    step "$w round $r"; timeout 280 python3 "${w%%:*}/bench/devices.py" "$spec" --one cuda:0 --many auto \
        --json "$OUT/${w##*:}_$r.json" > "$OUT/${w##*:}_$r.log" 2>&1
  done; done
  ;;
gate41)
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  for order in ".before_gate:gated .:ungated" ".:ungated .before_gate:gated"; do
    for w in $order; do
      r=$(ls "$OUT" | grep -c "^${w#*:}_.*json$"); r=$((r + 1))
      step "${w#*:} $r"; timeout 200 python3 "${w%:*}/bench/devices.py" sweeps/bert_memory.yaml --one cuda:0 --many auto \
          --rounds 1 --json "$OUT/${w#*:}_$r.json" > "$OUT/${w#*:}_$r.log" 2>&1
    done
  done
  ;;
early41)
  python3 -c "import torch, optuna, mlflow; [torch.zeros(1, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]" >/dev/null 2>&1
  for r in $(seq 1 "${E41_ROUNDS:-2}"); do
    order=".before_early:before .:early"; [ $((r % 2)) -eq 0 ] && order=".:early .before_early:before"
    for w in $order; do
      step "${w#*:} $r"; timeout 200 python3 "${w%:*}/bench/devices.py" sweeps/bert_memory.yaml --one cuda:0 --many auto \
          --rounds 1 --json "$OUT/${w#*:}_$r.json" > "$OUT/${w#*:}_$r.log" 2>&1
    done
  done
  python3 docs/gpu/early/contexts.py "$OUT"/*.json > "$OUT/contexts.txt" 2>&1
  ;;
s37b)
  step script-vs-module-cuda; timeout 380 python3 bench/script_vs_module.py --device cuda --rounds 4 --min-measure-s 3 \
      --json "$OUT/script_vs_module_cuda.json" > "$OUT/script_vs_module_cuda.log" 2>&1
  step script-vs-module-cpu; timeout 180 python3 bench/script_vs_module.py --device cpu --model tiny --seq-len 64 \
      --points float32:16 float32:64 bfloat16:64 --rounds 3 --hook-pairs 0 --min-measure-s 2 \
      --json "$OUT/script_vs_module_cpu.json" > "$OUT/script_vs_module_cpu.log" 2>&1
  ;;
l41a)
  export HF_HUB_OFFLINE=1
  LT=290 landscape hf_gpt2_cap012 hf_gpt2_h100_cap012
  LT=290 landscape hf_bert hf_bert_h100
  ;;
ahead)
  step "first step ahead"; for v in none generic; do python3 docs/gpu/first_step/ahead.py $v bfloat16 128; done > "$OUT/ahead_probe.log" 2>&1
  python3 -c "
import os, subprocess, torch
from orchestrator.harness import backend
backend.init_device('cuda'); a = torch.cuda.mem_get_info()[0]
backend.warm_kernels('cuda'); b = torch.cuda.mem_get_info()[0]
smi = subprocess.run(['nvidia-smi', '--query-compute-apps=pid,used_memory', '--format=csv,noheader'], capture_output=True, text=True).stdout
print(f'a prepared process: context then warm, free {a / 2**20:.0f} -> {b / 2**20:.0f} MiB; nvidia-smi: {smi.strip()}')
" >> "$OUT/ahead_probe.log" 2>&1
  step overhead; rm -rf /tmp/before_ahead && cp -r .before_ahead /tmp/before_ahead
  timeout 540 python3 bench/overhead.py --device cuda --compare /tmp/before_ahead --real sweeps/bert_memory.yaml --rounds 2 \
      --trials 4 --floor-repeats 3 --json "$OUT/overhead_ahead.json" > "$OUT/overhead_ahead.log" 2>&1
  ;;
jit)
  step "first steps across commands"; bash docs/gpu/first_step/sweeps.sh > "$OUT/first_steps.log" 2>&1
  ;;
sdpa)
  step "first steps by attention backend"; bash docs/gpu/first_step/sdpa.sh > "$OUT/first_step_sdpa.log" 2>&1
  ;;
cwd)
  step "first steps by working folder"; bash docs/gpu/first_step/cwd.sh ${CWD_PART:-} > "$OUT/first_step_cwd${CWD_PART:+_$CWD_PART}.log" 2>&1
  ;;
window)
  step "the headline with and without trial.precision"; bash docs/gpu/window/headline_precision.sh > "$OUT/headline_precision.log" 2>&1
  ;;
m40)
  step "the headline, the next process prepared at the window's end against at the result"
  bash docs/gpu/window/headline_measured.sh > "$OUT/headline_measured.log" 2>&1
  ;;
folders)
  step "the headline in a known and a new folder"; bash docs/gpu/first_step/headline_folders.sh > "$OUT/headline_folders.log" 2>&1
  ;;
ahead2)
  step fidelity; timeout 560 python3 bench/fidelity.py --device cuda --overlap --spec sweeps/bert_memory.yaml \
      --only batch_size=64 --configs 3 --rounds 3 > "$OUT/fidelity_ahead.log" 2>&1
  ;;
lhead)
  LT=560 landscape headline headline_h100
  ;;
l41b)
  export HF_HUB_OFFLINE=1
  LT=290 landscape bert_mini_compile bert_mini_compile_h100
  LT=290 landscape hf_llama_compile hf_llama_compile_h100_cap010
  ;;
l41c)  # the three batch-64 rows l41b's grid had no time for (its 290 s ran out at the 18th)
  export HF_HUB_OFFLINE=1
  sed -e 's/^name: .*/name: landscape_hf_llama_compile_b64_cuda/' -e 's/batch_size: \[4, 8, 16, 32, 64\]/batch_size: [64]/' \
      sweeps/landscape_hf_llama_compile_cuda.yaml > sweeps/landscape_hf_llama_compile_b64_cuda.yaml
  LT=200 landscape hf_llama_compile_b64 hf_llama_compile_h100_cap010_b64
  rm -f sweeps/landscape_hf_llama_compile_b64_cuda.yaml
  ;;
headline)
  R=$PWD; d=$(mktemp -d); cd "$d"
  step "headline from an empty folder"
  { time timeout 280 $ORCH "$R/sweeps/bert_memory.yaml"; } > "$OUT/headline.log" 2>&1
  step "report, best, check"
  { $ORCH report "$R/sweeps/bert_memory.yaml" --plots; echo "exit $?"; $ORCH best "$R/sweeps/bert_memory.yaml"; echo "exit $?";
    $ORCH check "$R/sweeps/bert_memory.yaml"; echo "exit $?"; } > "$OUT/headline_report.log" 2>&1
  mkdir -p "$OUT/plots"; cp mlruns/reports/*/*.png "$OUT/plots/" 2>/dev/null; cd "$R"
  ;;
script_tour)
  python3 -c "import torch, optuna, mlflow; torch.zeros(1, device='cuda')" >/dev/null 2>&1
  step "script tour"; bash docs/gpu/script_tour/run.sh > "$OUT/script_tour.log" 2>&1
  ;;
trainer_tour)
  python3 -c "import torch, optuna, mlflow; torch.zeros(1, device='cuda')" >/dev/null 2>&1
  step "trainer tour"; bash docs/gpu/trainer_tour/run.sh > "$OUT/trainer_tour.log" 2>&1
  ;;
workers)
  python3 -c "import torch, optuna, mlflow; torch.zeros(1, device='cuda')" >/dev/null 2>&1
  step "workers, fork server"; bash docs/gpu/workers/run.sh > "$OUT/workers.log" 2>&1
  step "workers, ORCHESTRATE_FORK=0"; ORCHESTRATE_FORK=0 bash docs/gpu/workers/run.sh > "$OUT/workers_nofork.log" 2>&1
  ;;
n38)
  R=$PWD
  for run in 1 2; do
    step "headline $run"; d=$(mktemp -d); cd "$d"
    { time timeout 280 $ORCH "$R/sweeps/bert_memory.yaml"; $ORCH report "$R/sweeps/bert_memory.yaml"; } \
        > "$OUT/noise_headline_$run.log" 2>&1; cd "$R"
  done
  step noise-cpu; timeout "${N38_NOISE_S:-900}" python3 bench/noise.py --no-load --json "$OUT/noise_cpu_h100_host.json" \
      > "$OUT/noise_cpu_h100_host.log" 2>&1
  ;;
esac
step done; tail -n 40 "$OUT"/*.log
