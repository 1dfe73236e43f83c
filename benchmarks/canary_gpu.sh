#!/usr/bin/env bash
# Train canary candidates on a lent GPU host (the device tool), side by side, and bring
# their checkpoints back. The host has torch and transformers and no network.
# transformers' PyTorch GDN reference does the linear attention: flash-linear-attention
# 0.6.0 refuses this host (its gated chunk backward gives wrong results on Hopper with
# Triton < 3.7.1, and the host has Triton 3.6.0).
#
# usage: benchmarks/canary_gpu.sh OUT "NAME ARGS..." ["NAME ARGS..." ...]
#   each candidate: a name, then benchmarks/canary_curriculum.py arguments (seed, stages, lr ...)
# Writes OUT/NAME.tar.gz (the checkpoint) and OUT/NAME.log (progress and report).
set -uo pipefail
out=$1; shift
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
# SIGTERM at the limit: the builder stops after the step in flight and saves what it has
# (a reproducible recipe: its stages cut at the step reached; canary_curriculum.Stop).
limit=${CANARY_GPU_LIMIT:-520}
pids=()
for spec in "$@"; do
  read -r -a words <<<"$spec"
  name=${words[0]}
  timeout -s TERM -k 45 "$limit" python3 benchmarks/canary_curriculum.py "/tmp/canary-$name" --device cuda "${words[@]:1}" \
    >"$out/$name.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for spec in "$@"; do
  name=${spec%% *}
  [ -f "/tmp/canary-$name/model.safetensors" ] && tar -C /tmp -czf "$out/$name.tar.gz" "canary-$name"
  grep -E '^\{"report"|^\{"out"' "$out/$name.log" | sed "s/^/$name /"
done
