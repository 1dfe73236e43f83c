#!/usr/bin/env bash
# A lease's sweeps one after another on the GPU host (`offline-host.sh packing` returns at
# once), from a frozen copy of the checkout (`offline-host.sh freeze`): the Ray head is
# restarted from the copy, so neither the sweeps nor their workers import from the folder the
# next `run` call copies over. Waits for `setup` (the uploads' background step) first.
#   setsid nohup bash benchmarks/gpu_chain.sh [--seed DB.xz] "RELEASES MATRIX LABEL:F" ... \
#     >/root/vmatrix-data/chain.log 2>&1 </dev/null &
# Each step is `packing`'s arguments; "CHAIN-DONE" ends the log.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
data=${VMATRIX_DATA:-/root/vmatrix-data}
frozen=$data/src
seed=
if [ "${1:-}" = "--seed" ]; then seed=$(cd "$repo" && realpath "$2"); shift 2; fi
until [ -f "$data/.setup-done" ]; do sleep 3; done
bash "$repo/images/offline-host.sh" freeze "$frozen" || exit 1
host=$frozen/images/offline-host.sh
bash "$host" restart-ray
[ -n "$seed" ] && bash "$host" seed "$seed"
for step in "$@"; do
  read -r rel matrix label <<<"$step"
  echo "$(date +%T) start $step"
  bash "$host" packing "$rel" "$matrix" "$label"
  sleep 3
  while pgrep -f "gpu_packing.s[h]" >/dev/null; do sleep 3; done
  echo "$(date +%T) done $step"
done
echo CHAIN-DONE
