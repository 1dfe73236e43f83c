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
# checkout for the uploads' size.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
n1c=$(realpath "$1") plan=$(realpath "$2")
shift 2
mkdir -p /root/nemo/train
rm -rf /root/nemo/n1c /root/nemo/n1c-bf16 /root/nemo/canary-n1c
tar -xf "$n1c" -C /root/nemo && mv /root/nemo/canary-n1c /root/nemo/n1c
mkdir -p /root/nemo/n1c-bf16 && cp /root/nemo/n1c/* /root/nemo/n1c-bf16/
python3 -c "import json, sys; p=sys.argv[1]; c=json.load(open(p)); c['torch_dtype']='bfloat16'; json.dump(c, open(p,'w'), indent=2)" \
  /root/nemo/n1c-bf16/config.json
for build in "$@"; do
  name=$(tar -tf "$build" | sed -n 1p | cut -d/ -f1)
  tar -xf "$build" -C /root/nemo
  rm -rf "/root/nemo/${name#canary-}" && mv "/root/nemo/$name" "/root/nemo/${name#canary-}"
  if [ -f "/root/nemo/${name#canary-}/resume.pt" ]; then tar -xf "$build" -C /tmp; fi
done
cd "$repo"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True setsid nohup python3 benchmarks/canary_gpu.py /root/nemo/train/out \
  --builder images/canary/build_nemotronh.py --plan "$plan" --deadline 1700 --grace 100000 \
  --stop-file /root/nemo/STOP --finish-file /root/nemo/FINISH --save-every 420 >/root/nemo/train/gpu.log 2>&1 </dev/null &
sleep 20; tail -n 5 /root/nemo/train/gpu.log; nvidia-smi --query-gpu=memory.used --format=csv || true
