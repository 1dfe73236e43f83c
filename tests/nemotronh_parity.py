"""Run by path in an engine venv (tests/test_nemotronh_parity.py): a Nemotron-H build's greedy
answers to chat requests, from vLLM (the offline ``LLM``, float32, no prefix caching) and from
transformers with the builder's own modules (images/canary/nemotronh_reference.py), as JSON:
per request the prompt's token ids, both answers' token ids and texts, and transformers'
top-1/top-2 log-probability margin at each of its steps.

    PYTHON nemotronh_parity.py CANARY_DIR MODEL_FOLDER REQUESTS_JSON MAX_TOKENS

REQUESTS_JSON: a list of message lists ([[role, content], ...]); both sides take the prompt as
the folder's chat template renders it (what vLLM's chat route does).
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
canary_dir, folder, requests_json, max_tokens = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sys.path.insert(0, canary_dir)
import nemotronh_reference as ref

tok, model = ref.load_build(folder)
prompts = [ref.prompt_ids(tok, messages) for messages in json.loads(Path(requests_json).read_text())]
reference = [ref.greedy(model, ids, max_tokens) for ids in prompts]
del model

from vllm import LLM, SamplingParams

llm = LLM(model=str(folder), dtype="float32", enforce_eager=True, enable_prefix_caching=False,
          max_model_len=4096, seed=0)
answers = llm.generate([{"prompt_token_ids": ids} for ids in prompts],
                       SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)
print("PARITY " + json.dumps([{"prompt": ids, "transformers": out, "margins": margins,
                               "vllm": list(a.outputs[0].token_ids),
                               "texts": [tok.decode(out, skip_special_tokens=True), a.outputs[0].text]}
                              for ids, (out, margins), a in zip(prompts, reference, answers)]))
