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
import corpus  # standard library only, shared with the replay workloads


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


def new_model(args, tokenizer, vocab_size: int):
    """The untrained canary (``args``: hidden, layers, max_len) and its config, drawn from
    torch's current seed, with the long-memory GDN decay."""
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    n_layers = args.layers
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n_layers)]
    cfg = Qwen3NextConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=n_layers,
        layer_types=layer_types,
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
    return model, cfg


def build_model(out: Path, seed: int, args, tokenizer, vocab_size: int) -> None:
    import torch

    # One thread: these matrices are too small for threads to pay off (measured: 1
    # thread is faster than 2 here), and the float reduction order, hence the trained
    # weights, then does not depend on how many cores the building host has.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model, cfg = new_model(args, tokenizer, vocab_size)
    mtp = _mtp_module()(cfg, seed)
    docs = documents(seed + 7, (args.train_steps + args.mtp_steps) * args.batch)
    if args.train_steps:
        train(model, tokenizer, args, seed, docs[: args.train_steps * args.batch])
    if args.mtp_steps:
        train_mtp(model, mtp, tokenizer, args, seed, docs[args.train_steps * args.batch:])
    if args.train_steps or args.mtp_steps:
        found = report(model, mtp, tokenizer, args, seed)
        (out / "canary-report.json").write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")

    save(out, model, mtp, cfg)


def save(out: Path, model, mtp, cfg) -> None:
    """Write the checkpoint vLLM loads: the target model plus ``mtp.*``.

    transformers fuses MoE experts in memory and unfuses them only in
    ``save_pretrained``, so the MTP decoder layer is saved as one extra layer of a
    copy of the model and renamed afterwards; its shapes thus always match the
    installed transformers.
    """
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3NextForCausalLM

    n_layers = cfg.num_hidden_layers
    full_cfg = type(cfg)(**{**cfg.to_dict(), "num_hidden_layers": n_layers + 1,
                            "layer_types": [*cfg.layer_types, "full_attention"]})
    full = Qwen3NextForCausalLM(full_cfg).to(torch.float32)
    weights = dict(model.state_dict())
    for name, t in mtp.state_dict().items():
        if name.startswith("layers.0."):
            weights[f"model.layers.{n_layers}." + name[len("layers.0."):]] = t
    full.load_state_dict(weights, strict=True)
    full.save_pretrained(out, safe_serialization=True)

    state = {}
    for f in sorted(out.glob("*.safetensors")):
        state.update(load_file(f))
        f.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    mtp_prefix = f"model.layers.{n_layers}."
    final = {}
    for name, t in state.items():
        final[("mtp.layers.0." + name[len(mtp_prefix):]) if name.startswith(mtp_prefix) else name] = t
    for name, t in mtp.state_dict().items():
        if not name.startswith("layers."):
            final["mtp." + name] = t
    final = {k: v.detach().contiguous() for k, v in sorted(final.items())}
    save_file(final, out / "model.safetensors", metadata={"format": "pt"})

    config = json.loads((out / "config.json").read_text())
    config["num_hidden_layers"] = n_layers
    config["layer_types"] = list(cfg.layer_types)
    config["num_nextn_predict_layers"] = 1
    config["architectures"] = ["Qwen3NextForCausalLM"]
    config.pop("transformers_version", None)
    config.pop("_attn_implementation", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    gen = out / "generation_config.json"
    gen.write_text(json.dumps({"eos_token_id": config["eos_token_id"], "pad_token_id": config["pad_token_id"]}, indent=2))


def _mtp_module():
    import torch
    from transformers import Qwen3NextForCausalLM
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNorm

    class MTPHead(torch.nn.Module):
        """vLLM's Qwen3-Next multi-token-prediction head, in transformers' modules.

        Mirrors ``Qwen3NextMultiTokenPredictor.forward`` so that what is trained here is
        what vLLM drafts with: the (shared) embedding of token t+1 and the target model's
        final, normed hidden state at t, each RMS-normed, concatenated, projected by
        ``fc``, run through one full-attention decoder layer, normed, and read out by the
        target's ``lm_head``. Parameter names are vLLM's ``mtp.*`` checkpoint names.
        """

        def __init__(self, cfg, seed: int) -> None:
            super().__init__()
            torch.manual_seed(seed + 1)
            h = cfg.hidden_size
            layer_cfg = type(cfg)(**{**cfg.to_dict(), "num_hidden_layers": 1, "layer_types": ["full_attention"]})
            # Eager attention with an explicit causal mask: the same in every
            # transformers release. The layer comes from a one-layer model so that
            # transformers initialises it (fused expert tensors start uninitialised).
            layer_cfg._attn_implementation = "eager"
            donor = Qwen3NextForCausalLM(layer_cfg).to(torch.float32)
            self.fc = torch.nn.Linear(2 * h, h, bias=False)
            self.pre_fc_norm_embedding = Qwen3NextRMSNorm(h, eps=cfg.rms_norm_eps)
            self.pre_fc_norm_hidden = Qwen3NextRMSNorm(h, eps=cfg.rms_norm_eps)
            self.layers = torch.nn.ModuleList([donor.model.layers[0]])
            self.norm = Qwen3NextRMSNorm(h, eps=cfg.rms_norm_eps)
            with torch.no_grad():
                self.fc.weight.normal_(0.0, 0.02)

        def forward(self, model, embeds, hidden, position_ids, mask):
            x = torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(hidden)], dim=-1)
            x = self.fc(x)
            rope = model.model.rotary_emb(x, position_ids)
            x = self.layers[0](x, position_embeddings=rope, attention_mask=mask, position_ids=position_ids)
            return self.norm(x)

    return MTPHead


def _causal_mask(length: int):
    import torch

    return torch.full((length, length), float("-inf")).triu(1)[None, None]


def _fit(module, params, loss_of, tokenizer, args, docs: list[str], steps: int, label: str) -> None:
    """``steps`` AdamW steps (one-cycle schedule, gradients clipped at 1) of ``loss_of``
    over ``docs`` in order, ``args.batch`` documents a step; ``module`` trains meanwhile."""
    import torch

    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
    module.train()
    t0 = time.time()
    for step in range(steps):
        batch = docs[step * args.batch:(step + 1) * args.batch]
        enc = tokenizer(batch, return_tensors="pt", padding=True, truncation=True, max_length=args.seq_len)
        loss = loss_of(enc["input_ids"], enc["attention_mask"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == steps - 1:
            # One JSON record a line: `vmatrix canary build` draws its progress bar from them.
            record = {"what": label, "step": step + 1, "steps": steps, "loss": round(loss.item(), 4),
                      "seconds": round(time.time() - t0, 1)}
            print("progress " + json.dumps(record), file=sys.stderr, flush=True)
    module.eval()


def train(model, tokenizer, args, seed: int, docs: list[str]) -> None:
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
    def loss_of(ids, att):
        return model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(att == 0, -100)).loss

    _fit(model, [p for p in model.parameters() if p.requires_grad], loss_of, tokenizer, args, docs,
         args.train_steps, "train")


def _mtp_logits(model, mtp, input_ids, attention_mask):
    """Logits of the MTP head for token i+2 at every i (the last two positions unused)."""
    import torch

    with torch.no_grad():
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        embeds = model.model.embed_tokens(input_ids[:, 1:])
    length = input_ids.shape[1] - 1
    position_ids = torch.arange(length)[None]
    out = mtp(model, embeds, hidden[:, :-1], position_ids, _causal_mask(length))
    return model.lm_head(out)


def train_mtp(model, mtp, tokenizer, args, seed: int, docs: list[str]) -> None:
    """Train the MTP head with the target model frozen (its embedding and lm_head are
    shared with the head in vLLM, so they must not move)."""
    import torch

    torch.manual_seed(seed + 2)
    for p in model.parameters():
        p.requires_grad_(False)
    def loss_of(ids, att):
        logits = _mtp_logits(model, mtp, ids, att)[:, :-1]
        labels = ids[:, 2:].masked_fill(att[:, 2:] == 0, -100)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)

    _fit(mtp, list(mtp.parameters()), loss_of, tokenizer, args, docs, args.mtp_steps, "mtp")


def _held_out(rng: random.Random, lines: int, turns: int) -> tuple[str, str, str]:
    """A document as (system prompt, the same prompt with every definition re-drawn,
    the conversation), so answers can be scored with either prompt in front."""
    system, defs = corpus.system_prompt(rng, lines)
    head = system.split("\n")[: -len(defs)]
    redrawn = [d.split(" = ")[0] + " = " + " ".join(rng.choice(corpus.WORDS) for _ in range(rng.randint(3, 6))) for d in defs]
    messages = []
    for t in range(turns):
        user, i = corpus.user_turn(rng, defs, t)
        messages += [("user", user), ("assistant", corpus.answer(defs, i))]
    return (corpus.chat([("system", system)]), corpus.chat([("system", "\n".join(head + redrawn))]),
            corpus.chat(messages))


def report(model, mtp, tokenizer, args, seed: int, count: int = 16) -> dict:
    """What the trained canary can do on held-out documents, printed as one JSON line.

    answer_accuracy: greedy next-token accuracy on the assistant's answers (which recite
    definitions from the system prompt); answer_margin_p50: the median top-1 minus top-2
    logprob there; context_sensitivity: the share of answer tokens whose greedy
    prediction changes when the system prompt's definitions are re-drawn (same names,
    other words): how much an answer depends on context thousands of tokens back;
    mtp_accuracy: how often the MTP head's greedy guess for token i+2 is right (what
    vLLM's MTP would accept at draft position 1 on this text, roughly); logit_scale: the
    largest top-1 logit at an answer token, which sets the bf16 resolution of the
    engine's logits there (the grader counts its tie margin in those steps).
    """
    import torch

    rng = random.Random(seed + 99)
    n, correct, changed, margins, mtp_ok, mtp_n, scale = 0, 0, 0, [], 0, 0, 0.0
    for _ in range(count):
        system, redrawn, conv = _held_out(rng, rng.randint(8, 16), 4)
        conv_ids, mask = _answer_mask(tokenizer, conv)
        preds = []
        for prompt in (system, redrawn):
            ids = torch.cat([tokenizer(prompt, return_tensors="pt")["input_ids"][0], conv_ids])[None]
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, -len(conv_ids) - 1:-1]
            preds.append(logits.argmax(-1))
            if prompt is system:
                top2 = logits.log_softmax(-1).topk(2, dim=-1).values
                margins += (top2[:, 0] - top2[:, 1])[mask].tolist()
                scale = max(scale, float(logits.max(-1).values[mask].abs().max()))
                correct += int(((preds[0] == conv_ids) & mask).sum())
                with torch.no_grad():
                    guess = _mtp_logits(model, mtp, ids, torch.ones_like(ids))[0, :-1].argmax(-1)
                mtp_ok += int((guess == ids[0, 2:]).sum())
                mtp_n += guess.shape[0]
        n += int(mask.sum())
        changed += int(((preds[0] != preds[1]) & mask).sum())
    margins.sort()
    found = {
        "answer_accuracy": round(correct / max(n, 1), 3),
        "answer_margin_p50": round(margins[len(margins) // 2], 3) if margins else None,
        "context_sensitivity": round(changed / max(n, 1), 3),
        "mtp_accuracy": round(mtp_ok / max(mtp_n, 1), 3),
        "answer_tokens": n,
        "logit_scale": round(scale, 3),
    }
    print(json.dumps(found), file=sys.stderr, flush=True)
    return found


def _answer_mask(tokenizer, text: str):
    """The conversation's token ids, and True at the tokens of assistant answers
    (content and the closing <|im_end|>: stopping is part of the answer)."""
    import re

    import torch

    enc = tokenizer(text, return_offsets_mapping=True)
    spans = [(m.start(1), m.end(1)) for m in re.finditer(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", text, re.DOTALL)]
    mask = [any(a <= start <= b for a, b in spans) for start, _ in enc["offset_mapping"]]
    return torch.tensor(enc["input_ids"]), torch.tensor(mask)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=65536)
    p.add_argument("--train-steps", type=int, default=0)
    p.add_argument("--mtp-steps", type=int, default=0)
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
