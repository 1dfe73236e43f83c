#!/bin/bash
# usage: benchmarks/tryload_drafter.sh ENVHASH DRAFTDIR TAG [extra env...], from the repository root:
# serve the canary with one DFlash drafter (k=4, prefix caching off), send one request, print the
# spec-decode counters and the log's errors (docs/dflash2.md, "What loads where").
E=$1; D=$2; TAG=$3; shift 3
P=~/.cache/vmatrix/envs/$E/bin/python
mkdir -p /tmp/drafters/logs; LOG=/tmp/drafters/logs/$TAG.log
env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 "$@" \
 nice -n 5 timeout 420 $P -m vllm.entrypoints.openai.api_server --model $(pwd)/images/canary/shipped/tiny-qwen3next --served-model-name canary --host 127.0.0.1 --port 18777 --seed 0 --max-model-len 4096 --distributed-executor-backend uni --enforce-eager --no-enable-prefix-caching --speculative-config "{\"method\": \"dflash\", \"num_speculative_tokens\": 4, \"model\": \"$D\"}" > $LOG 2>&1 &
PID=$!
for i in $(seq 1 200); do
  sleep 2
  if ! kill -0 $PID 2>/dev/null; then echo "DIED"; tail -30 $LOG; exit 1; fi
  if curl -s 127.0.0.1:18777/health >/dev/null 2>&1; then echo "UP after $((i*2))s"; break; fi
done
curl -s 127.0.0.1:18777/v1/completions -H 'content-type: application/json' -d '{"model":"canary","prompt":"<|im_start|>system\nvar_0042 = alpha omega delta\n<|im_end|>\n<|im_start|>user\nturn 0: read_file then show var_0042<|im_end|>\n<|im_start|>assistant\n","max_tokens":16,"temperature":0}' ; echo
sleep 1
curl -s 127.0.0.1:18777/metrics | grep -E "^vllm:spec_decode" | head
kill $PID; sleep 3; kill -9 $PID 2>/dev/null
grep -E "Error|error|refus|not support" $LOG | tail -8
