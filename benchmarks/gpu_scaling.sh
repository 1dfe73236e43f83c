#!/usr/bin/env bash
# Scaling of independent GPU cells, engines unbound vs bound to their GPU's cores
# (docs/GPU.md, docs/BENCHMARKS.md). Started on the GPU host by
#   bash images/offline-host.sh scaling examples/gpu-scaling.yaml
# which exports the paths; each measurement gets a fresh Ray head offering N GPUs, with
# VMATRIX_PIN_CPUS in its environment (Ray's workers, and so the cells, inherit it).
# Then: python benchmarks/gpu_scaling_summary.py $VMATRIX_DATA/results.db $VMATRIX_DATA/scaling.txt
set -uo pipefail
# One engine a GPU: what is measured is engines on separate GPUs (offline-host.sh packs
# canary cells onto shared GPUs otherwise).
export VMATRIX_GPU_FRACTION=
matrix=$1
shift
PY=${PYTHON:-python3}
DB=$VMATRIX_DATA/results.db
OUT=$VMATRIX_DATA/scaling.txt

ray_head() {  # GPUS PIN
  "$PY" -m ray.scripts.scripts stop >/dev/null 2>&1 || true
  VMATRIX_PIN_CPUS=$2 setsid "$PY" -m ray.scripts.scripts start --head --num-gpus="$1" --include-dashboard=false \
    --disable-usage-stats >>"$VMATRIX_DATA/ray-start.log" 2>&1 </dev/null
}

measure() {  # LABEL GPUS PIN
  ray_head "$2" "$3"
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$PY" -m vmatrix.orchestrator.cli sweep run "$matrix" --rerun --address auto --db "$DB" >"$VMATRIX_DATA/scaling-$1.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "$1 $2 $3 $t0 $t1 $rc" >>"$OUT"
}

# LABEL:GPUS:PIN (binding on/off); the rest of the command line, or this default. The
# first run compiles the GDN kernels (minutes) and is not counted; the orders alternate
# so that neither setting always goes first.
steps=("$@")
((${#steps[@]})) || steps=(warmup:2:0 unbound-2:2:0 bound-2:2:1 bound-1:1:1 unbound-1:1:0 bound-2b:2:1 unbound-2b:2:0)
for item in "${steps[@]}"; do
  IFS=: read -r label gpus pin <<<"$item"
  measure "$label" "$gpus" "$pin"
done
echo SCALING-DONE >>"$OUT"
