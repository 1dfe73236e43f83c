"""A finished Nemotron-H build (build_nemotronh.py's folder) answered by transformers with the
builder's own modules: the reference an engine's answers are held against
(tests/test_nemotronh_parity.py) and the builds' recall is measured with on the CPU
(benchmarks/nemotronh-resume/report_parity.py). Runs in an engine venv (torch, transformers
5.x), imported by path beside build_nemotronh.py. Not part of any recipe: the builders' bytes
are, so this is kept out of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_nemotronh as b


def load_build(folder: Path):
    """The build's tokenizer and its target model (no MTP head) in float32, eval mode, with the
    builder's einsum scan and block attention; the checkpoint's vLLM names (``backbone.*``) mapped
    back to transformers'. Raises SystemExit naming the folder if it is not this architecture."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, NemotronHConfig, NemotronHForCausalLM

    cfg = NemotronHConfig.from_pretrained(folder)
    b.use_einsum_scan()
    model = NemotronHForCausalLM(cfg).to(torch.float32)
    b.use_block_attention(model)
    weights = {("model." + k[len("backbone."):] if k.startswith("backbone.") else k): v
               for k, v in load_file(str(Path(folder) / "model.safetensors")).items() if not k.startswith("mtp.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{folder}: not the builder's architecture (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return AutoTokenizer.from_pretrained(folder), model.eval()


def prompt_ids(tokenizer, messages) -> list[int]:
    """Chat messages ([role, content] pairs) as the folder's chat template renders them for an
    answer: what vLLM's chat route and ``/tokenize`` send the model."""
    ids = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                        add_generation_prompt=True, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def greedy(model, ids: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy tokens up to and including the end of the turn (``eos_token_id``), and the top-1/top-2
    log-probability margin at each. The whole sequence again each step: no cache to differ from
    an engine's."""
    import torch

    x, out, margins = torch.tensor([ids]), [], []
    with torch.no_grad():
        for _ in range(max_tokens):
            top = model(input_ids=x).logits[0, -1].log_softmax(-1).topk(2)
            out.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            if out[-1] == model.config.eos_token_id:
                break
            x = torch.cat([x, top.indices[:1].view(1, 1)], dim=1)
    return out, margins
