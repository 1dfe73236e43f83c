"""Run by path in an engine venv (tests/test_nemotronh_parity.py): a Nemotron-H build's greedy
answers to chat requests, from vLLM (the offline ``LLM``, float32, no prefix caching) and from
transformers with the builder's own modules (build_nemotronh.new_model's einsum scan and block
attention, float32), as JSON: per request the prompt's token ids, both answers' token ids and
texts, and transformers' top-1/top-2 log-probability margin at each of its steps.

    PYTHON nemotronh_parity.py BUILDER_DIR MODEL_FOLDER REQUESTS_JSON MAX_TOKENS

REQUESTS_JSON: a list of message lists ([[role, content], ...]); both sides take the prompt as
the folder's chat template renders it (what vLLM's chat route does).
"""

import json
import os
import sys
from pathlib import Path

import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
builder_dir, folder, requests_json, max_tokens = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sys.path.insert(0, builder_dir)
import build_nemotronh as b
from safetensors.torch import load_file
from transformers import AutoTokenizer, NemotronHConfig, NemotronHForCausalLM

tok = AutoTokenizer.from_pretrained(folder)
prompts = []
for messages in json.loads(Path(requests_json).read_text()):
    ids = tok.apply_chat_template([{"role": r, "content": c} for r, c in messages], add_generation_prompt=True,
                                  return_dict=False)
    prompts.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))

cfg = NemotronHConfig.from_pretrained(folder)
b.use_einsum_scan()
model = NemotronHForCausalLM(cfg).to(torch.float32)
b.use_block_attention(model)
weights = {("model." + k[len("backbone."):] if k.startswith("backbone.") else k): v
           for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("mtp.")}
missing, unexpected = model.load_state_dict(weights, strict=False)
if missing or unexpected:
    raise SystemExit(f"not the builder's architecture: missing {missing[:3]}, unexpected {unexpected[:3]}")
model.eval()
ends = {cfg.eos_token_id}
reference = []
with torch.no_grad():
    for ids in prompts:
        x, out, margins = torch.tensor([ids]), [], []
        for _ in range(max_tokens):  # the whole prompt again each step: no cache to differ from vLLM's
            top = model(input_ids=x).logits[0, -1].log_softmax(-1).topk(2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            if out[-1] in ends:
                break
            x = torch.cat([x, top.indices[:1].view(1, 1)], dim=1)
        reference.append((out, margins))
del model

from vllm import LLM, SamplingParams

llm = LLM(model=str(folder), dtype="float32", enforce_eager=True, enable_prefix_caching=False,
          max_model_len=4096, seed=0)
answers = llm.generate([{"prompt_token_ids": ids} for ids in prompts],
                       SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)
print("PARITY " + json.dumps([{"prompt": ids, "transformers": ref, "margins": margins,
                               "vllm": list(a.outputs[0].token_ids),
                               "texts": [tok.decode(ref, skip_special_tokens=True), a.outputs[0].text]}
                              for ids, (ref, margins), a in zip(prompts, reference, answers)]))
