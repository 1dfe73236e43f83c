"""Write a tiny Granite-4.0-H hybrid (``GraniteMoeHybridForCausalLM``: Mamba2 mixers and one
attention layer, as IBM's Granite-4.0-H models), untrained: whether an engine loads and
serves this architecture at all (issue 41, item 4). Runs inside an engine venv, as
build_canary.py, whose tokenizer it uses as it is (the replays' recall language).

    python build_granitehybrid.py OUT --seed 0

Why the choices below (the tiny Nemotron-H's, build_nemotronh.py, where the families agree):
- ``layer_types`` three ``linear_attention`` (Mamba2) then one ``full_attention``: Granite's
  layer is a mixer *and* an MLP, so four layers are the Nemotron-H canary's ``M-M-M-*-``;
- no routed experts (``num_local_experts`` 0) and a dense ``shared_mlp``: Granite-4.0-H-Micro's
  layout, the dense one of the family (Tiny and Small route), and the CPU build's MoE path is
  not what this canary asks about;
- ``position_embedding_type`` ``nope``: Granite-4.0-H's attention has no positional encoding,
  as Nemotron-H's;
- Mamba2 head dim 64, state 128, one group, 4 heads, conv 4, chunk 128 (``mamba_expand`` 2
  over hidden 128 is the 256 channels 4 x 64 heads need): the Nemotron-H canary's, the dims
  vLLM's CPU chunked scan and ``selective_state_update`` are written for;
- 2 attention heads of 64 (Granite's head dim is hidden / heads): a head size every CPU
  attention backend takes;
- all multipliers 1: Granite's ``embedding_multiplier``, ``residual_multiplier``,
  ``attention_multiplier`` and ``logits_scaling`` scale what a trained model learnt; an
  untrained one has nothing to keep in range.
No MTP head: Granite-4.0-H has none, and vLLM loads none for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_canary as shared  # the tokenizer of tiny-qwen3next

LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]


def config(args, tokenizer, vocab_size: int):
    from transformers import GraniteMoeHybridConfig

    return GraniteMoeHybridConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        num_hidden_layers=len(LAYERS),
        layer_types=LAYERS,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=args.hidden // 64,
        intermediate_size=args.hidden * 2,
        shared_intermediate_size=args.hidden * 2,
        num_local_experts=0,
        position_embedding_type="nope",
        mamba_n_heads=4,
        mamba_d_head=64,
        mamba_d_state=128,
        mamba_n_groups=1,
        mamba_d_conv=4,
        mamba_expand=4 * 64 // args.hidden,
        mamba_chunk_size=128,
        mamba_conv_bias=True,
        mamba_proj_bias=False,
        embedding_multiplier=1.0,
        residual_multiplier=1.0,
        attention_multiplier=1.0,
        logits_scaling=1.0,
        max_position_embeddings=args.max_len,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )


def build(out: Path, args) -> None:
    import torch
    from transformers import GraniteMoeHybridForCausalLM

    if args.hidden not in (64, 128, 256):
        raise SystemExit(f"--hidden {args.hidden}: 64, 128 or 256 (4 Mamba2 heads of 64 are hidden x mamba_expand)")
    tokenizer = shared.build_tokenizer(out, args.seed, args.vocab)
    vocab_size = -(-len(tokenizer) // 64) * 64
    torch.manual_seed(args.seed)
    cfg = config(args, tokenizer, vocab_size)
    model = GraniteMoeHybridForCausalLM(cfg).to(torch.float32)
    # safetensors and config.json under transformers' names, which vLLM's
    # GraniteMoeHybridForCausalLM loads as they are (it maps A_log -> A itself).
    model.save_pretrained(out, safe_serialization=True)
    config_path = out / "config.json"
    written = json.loads(config_path.read_text())
    for key in ("transformers_version", "_attn_implementation", "dtype"):
        written.pop(key, None)
    written["torch_dtype"] = "float32"
    config_path.write_text(json.dumps(written, indent=2, sort_keys=True))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=131072)
    args = p.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    build(args.out, args)
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
