#!/usr/bin/env bash
# Issue 33 on one GPU host: the cells of a matrix unpacked, then at 0.5 and at 0.25 of
# the GPU a cell, one sweep each, in one run (docs/GPU.md "Several engines on one GPU",
# docs/BENCHMARKS.md). Started on the host by
#   bash images/offline-host.sh packing [RELEASE [MATRIX] [LABEL:FRACTION ...]]
# which exports the paths. RELEASE (default 0.25.1; several with commas: 0.25.1,0.26.0
# runs both releases' cells in one sweep) picks the matrix's engines (`--engine`);
# MATRIX (default benchmarks/gpu-packing.yaml; any argument without a colon) the cells,
# e.g. examples/field-bugs-gpu.yaml, whose `grading: calibrate: true` runs its control
# twice a step. The steps default to an unmeasured warm-up
# ($PACKING_WARMUP, default benchmarks/gpu-packing-warmup.yaml: the first start on a
# fresh host compiles the kernels, ~3 minutes), then serial (1), 0.5 and 0.25. Each
# step is a fresh `sweep run --rerun` of the same cells, joining the host's Ray head,
# from a copy of the matrix (written next to it, so its relative paths hold) whose
# `resources.gpus` is the step's fraction, with VMATRIX_GPU_FRACTION empty: the
# fraction is the step's whatever the matrix asks for (a cell's id does not depend on
# it). nvidia-smi samples the GPUs every 0.5 s meanwhile. Progress and times:
# $VMATRIX_DATA/packing.txt ("LABEL FRACTION T0 T1 RC" a step). The table:
#   python benchmarks/gpu_packing_summary.py $VMATRIX_DATA/results.db $VMATRIX_DATA/packing.txt
# (`offline-host.sh collect` writes it to packing.md).
set -uo pipefail
release=${1:-0.25.1}
(($#)) && shift
engines=()
IFS=, read -ra releases <<<"$release"
for r in "${releases[@]}"; do engines+=(--engine "$r"); done
MATRIX=benchmarks/gpu-packing.yaml
if (($#)) && [[ $1 != *:* ]]; then MATRIX=$1; shift; fi
PY=${PYTHON:-python3}
DB=$VMATRIX_DATA/results.db
OUT=$VMATRIX_DATA/packing.txt
WARMUP=${PACKING_WARMUP:-benchmarks/gpu-packing-warmup.yaml}

at_fraction() {  # MATRIX FRACTION LABEL -> the path of MATRIX's copy at FRACTION of a GPU a cell
  local copy
  copy=$(dirname "$1")/.packing-$3-$(basename "$1")
  "$PY" - "$1" "$2" "$copy" <<'EOF' || return 1
import sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))
spec.setdefault("resources", {})["gpus"] = float(sys.argv[2])
yaml.safe_dump(spec, open(sys.argv[3], "w"), sort_keys=False)
EOF
  echo "$copy"
}

measure() {  # LABEL FRACTION MATRIX
  local mem=$VMATRIX_DATA/packing-mem-$1.csv smi="" t0 t1 rc matrix
  if ! matrix=$(at_fraction "$3" "$2" "$1"); then echo "# $1: cannot write a copy of $3 at $2 of a GPU" >>"$OUT"; return; fi
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits \
      -lms 500 >"$mem" 2>/dev/null &
    smi=$!
  fi
  t0=$(date +%s.%N)
  VMATRIX_GPU_FRACTION= "$PY" -m vmatrix.orchestrator.cli sweep run "$matrix" "${engines[@]}" --rerun --address auto \
    --db "$DB" >"$VMATRIX_DATA/packing-$1.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  rm -f "$matrix"
  echo "$1 $2 $t0 $t1 $rc" >>"$OUT"
}

echo "# matrix: $MATRIX, engine: $release" >>"$OUT"
# A GPU in an exclusive compute mode takes one process at a time: no packing there.
mode=$(nvidia-smi --query-gpu=name,compute_mode --format=csv,noheader 2>/dev/null | tr '\n' ';' || true)
echo "# GPUs: ${mode:-no nvidia-smi}" >>"$OUT"
steps=("$@")
((${#steps[@]})) || steps=(warmup:1 serial:1 half:0.5 quarter:0.25)
for item in "${steps[@]}"; do
  IFS=: read -r label fraction <<<"$item"
  if [[ $mode == *Exclusive* && $fraction != 1 ]]; then echo "# $label skipped: exclusive compute mode" >>"$OUT"; continue; fi
  if [ "$label" = warmup ]; then measure "$label" "$fraction" "$WARMUP"; else measure "$label" "$fraction" "$MATRIX"; fi
done
echo PACKING-DONE >>"$OUT"
