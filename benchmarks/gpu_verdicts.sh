#!/usr/bin/env bash
# Issue 16 on one GPU host (docs/GPU.md): the sweeps one after another, in priority
# order, each joining the host's Ray head. Started on the host by
#   bash images/offline-host.sh verdicts [LABEL MATRIX RELEASE [--FLAG ...] ...]
# which exports the paths. Without arguments: the 0.26.0 plan of 2026-12-01 (below);
# with them, those sweeps in the order given (the 0.25.1 plans: docs/GPU.md). Flags
# after a sweep's RELEASE go to its `sweep run` (--rerun, --controls-only): a repeat of
# recorded cells is one more entry of the plan. A release is swept only once its uploads are complete:
# the last upload of a release touches $VMATRIX_WHEELHOUSE/vllm-X/.complete (the
# driver waits up to $VERDICTS_WAIT_S for it). Progress: $VMATRIX_DATA/verdicts.txt.
set -uo pipefail
PY=${PYTHON:-python3}
DB=$VMATRIX_DATA/results.db
OUT=$VMATRIX_DATA/verdicts.txt
WAIT_S=${VERDICTS_WAIT_S:-1800}

sweep() {  # LABEL MATRIX RELEASE [FLAG ...]
  local waited=0
  while [ ! -f "$VMATRIX_WHEELHOUSE/vllm-$3/.complete" ]; do
    if ((waited >= WAIT_S)); then echo "$1 skipped: vllm-$3 not uploaded after ${WAIT_S}s" >>"$OUT"; return; fi
    sleep 5; waited=$((waited + 5))
  done
  local t0 rc
  t0=$(date +%s)
  echo "$1 start $t0" >>"$OUT"
  "$PY" -m vmatrix.orchestrator.cli sweep run "$2" --address auto --db "$DB" "${@:4}" >"$VMATRIX_DATA/sweep-$1.log" 2>&1
  rc=$?
  echo "$1 end $(date +%s) rc=$rc wall=$(( $(date +%s) - t0 ))s" >>"$OUT"
}

# 1: the four cells on 0.26.0 (controls twice: the noise floor); 2: the CUDA positive
# control on the same workload; 3: the field-bug try on 0.25.1.
if (($# == 0)); then
  set -- verdicts examples/gpu-verdicts.yaml 0.26.0 \
    positive examples/gpu-positive.yaml 0.26.0 \
    field examples/gpu-field.yaml 0.25.1
fi
while (($#)); do
  if (($# < 3)); then echo "usage: $0 [LABEL MATRIX RELEASE [--FLAG ...] ...]" >&2; exit 2; fi
  entry=("$1" "$2" "$3")
  shift 3
  while (($#)) && [[ $1 == --* ]]; do entry+=("$1"); shift; done
  sweep "${entry[@]}"
done
echo VERDICTS-DONE >>"$OUT"
