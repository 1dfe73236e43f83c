#!/usr/bin/env bash
# Run vmatrix on an offline GPU host from uploaded wheelhouse pieces (docs/GPU.md).
#
#   offline-host.sh unpack UPLOAD ...   copy uploads in; finish what is complete. Uploads of
#                                       xz volumes (images/volumes.py) are checked and applied,
#                                       each once; the line says which volumes are still missing
#   offline-host.sh overlay-check TORCH the staged torch overlay _torch-TORCH imports and uses
#                                       the GPU (images/overlay.py), before any engine starts
#   offline-host.sh lmcache-check LMCACHE [TORCH]
#                                       LMCache's compiled ops (lmcache.cuda_ops) load on the staged
#                                       torch overlay (default 2.13.0) as its engine would load them,
#                                       or the loader's error line (docs/GPU.md)
#   offline-host.sh feed UPLOAD ...     unpack, then in the background what the folders complete
#                                       so far allow: `setup` once _vmatrix is in, `overlay-check`
#                                       once a _torch-* is in (feed.log), while uploads go on
#   offline-host.sh setup               vmatrix's own dependencies + a Ray head on this host
#   offline-host.sh init-db             create (migrate) the results DB
#   offline-host.sh seed DB[.xz]        make an earlier lease's DB this host's, while it holds no run
#   offline-host.sh freeze [DEST]       copy this checkout to DEST (default $VMATRIX_DATA/src) for
#                                       sweeps to run from, out of reach of later uploads
#                                       (benchmarks/gpu_chain.sh)
#   offline-host.sh sweep MATRIX ENGINE [--rerun]
#                                       run MATRIX's cells of ENGINE in the background,
#                                       then its controls again (the noise floor)
#   offline-host.sh scaling MATRIX      benchmarks/gpu_scaling.sh in the background
#   offline-host.sh verdicts [LABEL MATRIX RELEASE ...]
#                                       benchmarks/gpu_verdicts.sh in the background (issue 16)
#   offline-host.sh packing [RELEASE [MATRIX] [LABEL:FRACTION ...]]
#                                       benchmarks/gpu_packing.sh in the background (issue 33)
#   offline-host.sh complete RELEASE    mark vllm-RELEASE's uploads complete (after its last one)
#   offline-host.sh restart-ray         a fresh Ray head (after changing the environment)
#   offline-host.sh status              runs recorded so far, sweeps still running
#   offline-host.sh collect DEST        results DB, tables and engine logs into DEST
#
# Paths (override in the environment): VMATRIX_WHEELHOUSE (the uploads land here),
# VMATRIX_SITE (vmatrix's dependencies), VMATRIX_DATA (results DB and logs). The
# engine venvs and the canary live in $VMATRIX_WHEELHOUSE/_cache.
#
# Canary cells share GPUs: VMATRIX_GPU_FRACTION (default 0.25) is the share of a GPU a
# canary cell gets where its matrix asks for a whole one, grown to fit the matrix's own
# --gpu-memory-utilization (0.3 -> 0.33: three engines a GPU); the engines on one GPU
# profile their memory one at a time, each taking the GPU's gate in its worker
# (images/gpu_gate; docs/GPU.md, "Several engines on one GPU").
# VMATRIX_GPU_FRACTION= (empty) runs one engine a GPU.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
export VMATRIX_WHEELHOUSE=${VMATRIX_WHEELHOUSE:-/root/vmatrix-wheelhouse}
export VMATRIX_SITE=${VMATRIX_SITE:-/root/vmatrix-site}
export VMATRIX_DATA=${VMATRIX_DATA:-/root/vmatrix-data}
export VMATRIX_CACHE=$VMATRIX_WHEELHOUSE/_cache
export VMATRIX_GPU_FRACTION=${VMATRIX_GPU_FRACTION-0.25}
# The checkout is not installed here: with it on PYTHONPATH, vmatrix/__init__.py finds its
# layers beside it (vmatrix.db is $REPO/db), for this shell and the Ray workers it starts.
export PYTHONPATH=$VMATRIX_SITE:$REPO
export RAY_USAGE_STATS_ENABLED=0
# flashinfer is not staged (its kernels are JIT-built and large); without this vLLM's
# sampler imports it on CUDA and the engine dies with "No module named 'flashinfer'".
# Engines inherit it through the Ray head's environment.
export VLLM_USE_FLASHINFER_SAMPLER=0
PY=${PYTHON:-python3}
DB=$VMATRIX_DATA/results.db
cd "$REPO"

case "${1:-}" in
  unpack)
    shift
    if [ -f "$1/vmatrix-volumes.json" ]; then
      "$PY" -m vmatrix.images.volumes apply "$@" "$VMATRIX_WHEELHOUSE"
    else
      for up in "$@"; do "$PY" -m vmatrix.images.uploads unpack "$up" "$VMATRIX_WHEELHOUSE"; done
    fi ;;
  feed)
    shift
    "$REPO/images/offline-host.sh" unpack "$@"
    mkdir -p "$VMATRIX_DATA"
    # One background pass at a time (flock -n: a pass already running will see this
    # upload's folders on its next look); each step runs once (its own marker).
    setsid nohup flock -n "$VMATRIX_DATA/feed.lock" "$REPO/images/offline-host.sh" feed-steps \
      >>"$VMATRIX_DATA/feed.log" 2>&1 </dev/null &
    echo "background: $VMATRIX_DATA/feed.log" ;;
  feed-steps)
    if [ -f "$VMATRIX_WHEELHOUSE/_vmatrix/.complete" ] && [ ! -f "$VMATRIX_DATA/.setup-done" ]; then
      "$REPO/images/offline-host.sh" setup && touch "$VMATRIX_DATA/.setup-done"
    fi
    for ov in "$VMATRIX_WHEELHOUSE"/_torch-*; do
      if [ -f "$ov/.complete" ] && [ ! -f "$ov/.vmatrix-checked" ]; then
        "$REPO/images/offline-host.sh" overlay-check "${ov##*/_torch-}" || true
      fi
    done ;;
  overlay-check)
    # Compiled once here, so that seven engines starting at once do not each compile
    # torch's modules from source.
    "$PY" -m compileall -q -j 0 "$VMATRIX_WHEELHOUSE/_torch-$2" >/dev/null 2>&1 || true
    "$PY" -m vmatrix.images.overlay check "$VMATRIX_WHEELHOUSE/_torch-$2" ;;
  lmcache-check)
    # lmcache-VERSION's wheels (--no-deps, as the engine's env installs them) into a folder of
    # their own, once, then a fresh interpreter with the overlay first on PYTHONPATH imports
    # torch and lmcache.cuda_ops (images/overlay.py `import`).
    lm=$VMATRIX_WHEELHOUSE/lmcache-$2 site=$VMATRIX_DATA/lmcache-$2-site
    if [ ! -f "$site/.done" ]; then
      rm -rf "$site"
      "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$site" "$lm"/*.whl
      touch "$site/.done"
    fi
    "$PY" -m vmatrix.images.overlay import "$VMATRIX_WHEELHOUSE/_torch-${3:-2.13.0}" lmcache.cuda_ops --path "$site" ;;
  setup)
    mkdir -p "$VMATRIX_DATA"
    if [ ! -f "$VMATRIX_SITE/.done" ]; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$VMATRIX_SITE" "$VMATRIX_WHEELHOUSE"/_vmatrix/*.whl
      touch "$VMATRIX_SITE/.done"
    fi
    "$PY" -c 'import ray, sqlalchemy, alembic, pydantic, torch; print("ray", ray.__version__, "torch", torch.__version__, "gpus", torch.cuda.device_count())'
    # Create the results DB (migrations) before sweeps start side by side.
    "$REPO/images/offline-host.sh" init-db
    # One Ray head for every sweep on this host, so concurrent sweeps share the GPUs'
    # accounting. setsid: the head must outlive the command that started it.
    if ! "$PY" -m ray.scripts.scripts status >/dev/null 2>&1; then
      setsid "$PY" -m ray.scripts.scripts start --head --include-dashboard=false --disable-usage-stats \
        >"$VMATRIX_DATA/ray-start.log" 2>&1 </dev/null
    fi
    "$PY" -m ray.scripts.scripts status 2>/dev/null | grep -E "GPU|CPU" || true ;;
  init-db)
    # A command that writes creates it (a read of a DB that is not there is an error).
    mkdir -p "$VMATRIX_DATA"
    "$PY" -c 'import sys; from vmatrix.db.store import Store; Store.open(sys.argv[1]).close()' "$DB" ;;
  seed)
    # Continue an earlier lease's DB here (docs/runs/NAME.db.xz or a plain .db), so this
    # host's sweeps append to it: only while the host's DB holds no run (setup creates it
    # empty), so nothing recorded on this host is replaced. Before any sweep starts.
    mkdir -p "$VMATRIX_DATA"
    "$PY" - "$2" "$DB" <<'EOF'
import shutil, sqlite3, sys, tempfile
from pathlib import Path
from vmatrix.db import copies
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
if not src.is_file():
    sys.exit(f"seed: {src}: no such file")
if dst.exists():
    try:
        runs = sqlite3.connect(dst).execute("select count(*) from runs").fetchone()[0]
    except sqlite3.Error:
        runs = 0  # no runs table: nothing recorded yet
    if runs:
        sys.exit(f"seed: {dst} already holds {runs} runs; not replaced")
part = dst.with_name(dst.name + ".part")
with tempfile.TemporaryDirectory() as folder:  # an .xz unpacked as `--db NAME.db.xz` reads it
    shutil.copyfile(copies.unpacked(src, Path(folder)) if src.suffix == ".xz" else src, part)
for side in ("-wal", "-shm"):
    Path(f"{dst}{side}").unlink(missing_ok=True)
part.replace(dst)
print(f"seed: {dst} is {src} ({dst.stat().st_size} bytes)")
EOF
    ;;
  freeze)
    # Every `run` call copies the working tree onto the host again. On 2026-12-05 a call that
    # began while a sweep's Ray workers were importing vmatrix crashed 5 of its 8 cells ("cannot
    # import name 'speed' from 'vmatrix'"). Sweeps run from this copy instead (its own
    # offline-host.sh: `restart-ray` there, so the head and its workers import from it too).
    # The uploads, .git and docs/runs stay behind; the copy is renamed into place whole.
    dest=${2:-$VMATRIX_DATA/src}
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    tar -C "$REPO" --exclude=./.gpu --exclude=./.stage --exclude=./.git --exclude=./docs/runs -cf - . \
      | tar -C "$dest.tmp" -xf -
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    echo "frozen: $dest" ;;
  sweep)
    matrix=$2 engine=$3 extra=${4:-}
    log=$VMATRIX_DATA/sweep-$engine.log
    setsid nohup bash -c "
      '$PY' -m vmatrix.orchestrator.cli sweep run '$matrix' --engine '$engine' --address auto --db '$DB' $extra
      '$PY' -m vmatrix.orchestrator.cli sweep run '$matrix' --engine '$engine' --controls-only --rerun --address auto --db '$DB'
      echo SWEEP-DONE" >"$log" 2>&1 </dev/null &
    echo "started: $log" ;;
  scaling)
    # benchmarks/gpu_scaling.sh in the background: poll `status`, then `collect`.
    setsid nohup bash "$REPO/benchmarks/gpu_scaling.sh" "${@:2}" >"$VMATRIX_DATA/scaling-driver.log" 2>&1 </dev/null &
    echo "started: $VMATRIX_DATA/scaling.txt" ;;
  verdicts)
    setsid nohup bash "$REPO/benchmarks/gpu_verdicts.sh" "${@:2}" >"$VMATRIX_DATA/verdicts-driver.log" 2>&1 </dev/null &
    echo "started: $VMATRIX_DATA/verdicts.txt" ;;
  packing)
    setsid nohup bash "$REPO/benchmarks/gpu_packing.sh" "${@:2}" >"$VMATRIX_DATA/packing-driver.log" 2>&1 </dev/null &
    echo "started: $VMATRIX_DATA/packing.txt" ;;
  complete)
    ls "$VMATRIX_WHEELHOUSE/vllm-$2"/vllm-*.whl >/dev/null && touch "$VMATRIX_WHEELHOUSE/vllm-$2/.complete" ;;
  restart-ray)
    "$PY" -m ray.scripts.scripts stop >/dev/null 2>&1 || true
    setsid "$PY" -m ray.scripts.scripts start --head --include-dashboard=false --disable-usage-stats \
      >"$VMATRIX_DATA/ray-start.log" 2>&1 </dev/null
    "$PY" -m ray.scripts.scripts status 2>/dev/null | grep -E "GPU" || true ;;
  status)
    "$PY" -m vmatrix.orchestrator.cli results ls --db "$DB" 2>/dev/null | tail -n 25 || true
    for log in "$VMATRIX_DATA"/sweep-*.log; do
      [ -f "$log" ] && echo "$log: $(grep -c SWEEP-DONE "$log" || true) done"
    done
    [ -f "$VMATRIX_DATA/scaling.txt" ] && cat "$VMATRIX_DATA/scaling.txt"
    [ -f "$VMATRIX_DATA/verdicts.txt" ] && cat "$VMATRIX_DATA/verdicts.txt"
    [ -f "$VMATRIX_DATA/packing.txt" ] && cat "$VMATRIX_DATA/packing.txt"
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader || true ;;
  collect)
    dest=$2
    mkdir -p "$dest"
    "$PY" - "$DB" "$dest/results.db" <<'EOF'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2])
src.backup(dst)  # a consistent copy while WAL files may still hold pages
EOF
    "$PY" -m vmatrix.orchestrator.cli results table --db "$DB" --rows engine --cols prefix_caching,speculative \
      --format markdown >"$dest/table.md" 2>&1 || true
    "$PY" -m vmatrix.orchestrator.cli results noise --db "$DB" >"$dest/noise.txt" 2>&1 || true
    if [ -f "$VMATRIX_DATA/packing.txt" ]; then
      "$PY" benchmarks/gpu_packing_summary.py "$DB" "$VMATRIX_DATA/packing.txt" >"$dest/packing.md" 2>&1 || true
    fi
    cp "$VMATRIX_DATA"/sweep-*.log "$VMATRIX_DATA"/scaling*.txt "$VMATRIX_DATA"/scaling*.log \
      "$VMATRIX_DATA"/verdicts*.txt "$VMATRIX_DATA"/packing*.txt "$VMATRIX_DATA"/packing*.log \
      "$VMATRIX_DATA"/packing-mem-*.csv "$dest/" 2>/dev/null || true
    tar -czf "$dest/engine-logs.tgz" -C "$VMATRIX_DATA" logs 2>/dev/null || true ;;
  *)
    sed -n '2,40p' "$0"; exit 2 ;;
esac
