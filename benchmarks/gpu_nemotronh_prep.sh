#!/usr/bin/env bash
# A lease's first call for the Nemotron-H work (issue 41), on the GPU host: the n1c models the
# Mamba2 matrices serve (n1c, and n1c-bf16: the same weights, its config saying bfloat16, as
# benchmarks/nemotronh-resume/n1c-field-bugs-gpu.yaml's header says) and a canary pass in the
# background (benchmarks/canary_gpu.py with --stop-file and --finish-file: a later call touches
# FINISH, which cuts each build's recipe where it stands so that it finishes (MTP head, report)
# in ~2 minutes, or STOP, which stops them as they are; then it collects). Every 7 minutes each
# build is saved to /root/nemo/train/out/NAME.tar and resumed (--save-every), and every poll
# call's gpu_lease_out.sh sends the newest back: a host lost mid-stage loses 7 minutes at most.
#   bash benchmarks/gpu_nemotronh_prep.sh N1C_TAR PLAN [BUILD_TAR ...]
# N1C_TAR: n1c-final.tar; PLAN: a pass's plan file; each BUILD_TAR (a build folder canary-NAME/:
# h16-s1-seventh.tar holds canary-h16-s1/) is unpacked to /root/nemo/NAME for the plan's
# `--init-from`, and a stopped one (holding resume.pt) also to /tmp, where canary_gpu.py
# resumes it. The tars travel in an upload folder (.gpu/...): they are moved out of the
# checkout for the uploads' size. NEMO_DIR (default /root/nemo) and RESUME_DIR (default /tmp)
# say where to unpack, BUILDER which builder the plan runs (default: the plan's own
# `# builder: PATH` line, else build_nemotronh.py), and PREP_TRAIN=0 stops before the
# trainer: tests/test_gpu_prep.py unpacks a pass's tars that way.
set -euo pipefail
nemo=${NEMO_DIR:-/root/nemo} resume=${RESUME_DIR:-/tmp}
repo=$(cd "$(dirname "$0")/.." && pwd)
n1c=$(realpath "$1") plan=$(realpath "$2")
shift 2
builder=${BUILDER:-$(sed -n 's/^# builder: *//p' "$plan" | sed -n 1p)}
builder=${builder:-images/canary/build_nemotronh.py}
(cd "$repo" && test -f "$builder") || { echo "gpu_nemotronh_prep.sh: builder $builder: no such file" >&2; exit 2; }
echo "builder: $builder"
mkdir -p "$nemo/train"
rm -rf "$nemo/n1c" "$nemo/n1c-bf16" "$nemo/canary-n1c"
tar -xf "$n1c" -C "$nemo" && mv "$nemo/canary-n1c" "$nemo/n1c"
mkdir -p "$nemo/n1c-bf16" && cp "$nemo/n1c"/* "$nemo/n1c-bf16/"
python3 -c "import json, sys; p=sys.argv[1]; c=json.load(open(p)); c['torch_dtype']='bfloat16'; json.dump(c, open(p,'w'), indent=2)" \
  "$nemo/n1c-bf16/config.json"
for build in "$@"; do
  name=$(tar -tf "$build" | sed -n 1p | cut -d/ -f1)
  tar -xf "$build" -C "$nemo"
  rm -rf "$nemo/${name#canary-}" && mv "$nemo/$name" "$nemo/${name#canary-}"
  if [ -f "$nemo/${name#canary-}/resume.pt" ]; then tar -xf "$build" -C "$resume"; fi
done
[ "${PREP_TRAIN:-1}" = 0 ] && exit 0
cd "$repo"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True setsid nohup python3 benchmarks/canary_gpu.py "$nemo/train/out" \
  --builder "$builder" --plan "$plan" --deadline 1700 --grace 100000 \
  --stop-file "$nemo/STOP" --finish-file "$nemo/FINISH" --save-every 420 >"$nemo/train/gpu.log" 2>&1 </dev/null &
sleep 20; tail -n 5 "$nemo/train/gpu.log"; nvidia-smi --query-gpu=memory.used --format=csv || true
