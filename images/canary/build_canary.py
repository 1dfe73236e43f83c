"""Write a tiny Qwen3-Next-style hybrid canary model, deterministically.

Runs *inside an engine venv* (its own torch, transformers and tokenizers), so it
must not import vmatrix. Usage:

    python build_canary.py OUT_DIR --seed 0 [--hidden 128 ...]

Why the choices below (see shared/ENGINES.md):
- linear-attention head dims are 128: the CPU GDN kernel rejects 32;
- ``A_log`` ~ log U(0.005, 0.05) and ``dt_bias`` = 0 give a per-token decay of
  0.988..0.996, so the recurrent state carries information across a long prefix.
  With transformers' default init the state forgets everything every token, and a
  corrupted carried state cannot change any output: the canary would be blind;
- MTP weights (``mtp.*``) are written because vLLM's Qwen3-Next MTP loader wants
  them: the MTP decoder layer is a full-attention layer built by transformers and
  renamed, so its shapes always match the installed transformers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402  (standard library only, shared with the replay workloads)


def documents(seed: int, count: int, lines: tuple[int, int] = (4, 16), turns: int = 4) -> list[str]:
    rng = random.Random(seed)
    return [corpus.training_document(rng, rng.randint(*lines), turns) for _ in range(count)]


def build_tokenizer(out: Path, seed: int, vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents(seed, 400), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, seed: int, args, tokenizer, vocab_size: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(seed)
    n_layers = args.layers
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n_layers)]
    # One extra full-attention layer is built and renamed into the MTP head.
    cfg = Qwen3NextConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=n_layers + 1,
        layer_types=layer_types + ["full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=args.hidden,
        shared_expert_intermediate_size=args.hidden,
        max_position_embeddings=args.max_len,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen3NextForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            lin = getattr(layer, "linear_attn", None)
            if lin is not None:
                lin.A_log.copy_(torch.empty_like(lin.A_log).uniform_(0.005, 0.05).log())
                lin.dt_bias.zero_()
    if args.train_steps:
        train(model, tokenizer, args, seed)
    model.save_pretrained(out, safe_serialization=True)

    # Move the extra layer under mtp.* and add the MTP-only tensors.
    state = {}
    for f in sorted(out.glob("*.safetensors")):
        state.update(load_file(f))
        f.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    mtp_prefix = f"model.layers.{n_layers}."
    final = {}
    for name, t in state.items():
        if name.startswith(mtp_prefix):
            final["mtp.layers.0." + name[len(mtp_prefix):]] = t
        else:
            final[name] = t
    h = args.hidden
    g = torch.Generator().manual_seed(seed + 1)
    final["mtp.fc.weight"] = torch.randn(h, 2 * h, generator=g) * 0.02
    for norm in ("mtp.norm.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_embedding.weight"):
        final[norm] = torch.zeros(h)
    final = {k: v.contiguous() for k, v in sorted(final.items())}
    save_file(final, out / "model.safetensors", metadata={"format": "pt"})

    config = json.loads((out / "config.json").read_text())
    config["num_hidden_layers"] = n_layers
    config["layer_types"] = layer_types
    config["num_nextn_predict_layers"] = 1
    config["architectures"] = ["Qwen3NextForCausalLM"]
    config.pop("transformers_version", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    gen = out / "generation_config.json"
    gen.write_text(json.dumps({"eos_token_id": config["eos_token_id"], "pad_token_id": config["pad_token_id"]}, indent=2))


def train(model, tokenizer, args, seed: int) -> None:
    """A few CPU minutes of next-token training on the recall corpus.

    The GDN decay parameters stay frozen at their long-memory values: training would
    otherwise be free to shorten the memory, and a state that forgets cannot be
    corrupted visibly. Deterministic: seeded data order, single-threaded reductions.
    """
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    for layer in model.model.layers:
        lin = getattr(layer, "linear_attn", None)
        if lin is not None:
            lin.A_log.requires_grad_(False)
            lin.dt_bias.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.train_steps, pct_start=0.1)
    docs = documents(seed + 7, args.train_steps * args.batch)
    model.train()
    t0 = time.time()
    for step in range(args.train_steps):
        batch = docs[step * args.batch:(step + 1) * args.batch]
        enc = tokenizer(batch, return_tensors="pt", padding=True, truncation=True, max_length=args.seq_len)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == args.train_steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    model.eval()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=65536)
    p.add_argument("--train-steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=768)
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(args.out, args.seed, args.vocab)
    vocab_size = -(-len(tok) // 64) * 64
    build_model(args.out, args.seed, args, tok, vocab_size)
    print(json.dumps({"out": str(args.out), "vocab_size": vocab_size, "tokens": len(tok)}))


if __name__ == "__main__":
    main()
