"""Write the tiny Qwen3-Next-style hybrid canary and train it to recall, reproducibly.

Runs *inside an engine venv* or on a GPU host (its own torch, transformers and
tokenizers), so it must not import vmatrix. Usage:

    python build_canary.py OUT --seed 0 [--stage "lines=2-12 batch=64 steps=3000 ..."]...

Without stages it writes the untrained model. Why the choices below (shared/ENGINES.md,
images/canary/README.md):
- linear-attention head dims are 128: the CPU GDN kernel rejects 32;
- ``A_log`` ~ log U(0.005, 0.05) and ``dt_bias`` = 0 give a per-token decay of
  0.988..0.996, frozen in training: the recurrent state carries information across a
  long prefix, and a corrupted carried state changes later outputs. With transformers'
  default init the state forgets everything every token and the canary would be blind;
- one full-attention layer, the last: it can find a name thousands of tokens back, but
  only through keys the GDN layers wrote (the conv window is 4 tokens, a name is 5), so
  recall goes through the carried state;
- a length curriculum (``--stage``, repeated): recall is learnt on documents of a few
  definitions, after a plateau whose length varies from run to run (``until`` ends a
  stage once the answer loss is that low), then carried to the replays' 1.5k-21k tokens;
- loss on answer tokens only: the definitions are random words no model can predict;
- MTP weights (``mtp.*``) are written because vLLM's Qwen3-Next MTP loader wants them,
  and trained (``--mtp-stage``) with the target frozen, so speculative decoding accepts
  drafts as with a real model;
- batches come from per-step seeds, made in DataLoader workers on a GPU, so a build
  stopped by SIGTERM (a time-boxed call on a lent GPU) saves ``resume.pt`` and
  ``--resume`` continues it on the same batches. On the CPU a build is bit-for-bit
  reproducible (one thread); CUDA's attention backward is not deterministic, so a GPU
  rebuild is the same recipe and data, not the same bytes.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
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
    # Digits one by one: every var_NNNN is the same tokens, whatever BPE learned.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
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


def _causal_mask(length: int, device=None):
    import torch

    return torch.full((length, length), float("-inf"), device=device).triu(1)[None, None]


@dataclass(frozen=True)
class Stage:
    """One step of a curriculum: documents of ``lines`` definitions (``batch`` of them a
    step, all with the same count, so padding costs little) and ``turns`` questions, for
    at most ``steps`` steps at learning rate ``lr``; ``until``: end the stage early once
    the answer loss (a running mean) is below it."""

    lines: tuple[int, int]
    batch: int
    steps: int
    lr: float
    turns: int = 8
    until: float | None = None

    @classmethod
    def parse(cls, text: str) -> Stage:
        """``lines=2-12 batch=64 steps=3000 lr=3e-3 [turns=8] [until=0.05]`` -> a stage."""
        fields = dict(part.split("=", 1) for part in text.split())
        unknown = set(fields) - {"lines", "batch", "steps", "lr", "turns", "until"}
        if unknown or not {"lines", "batch", "steps", "lr"} <= set(fields):
            raise SystemExit(f"--stage {text!r}: needs lines, batch, steps, lr (and maybe turns, until)")
        lo, hi = fields["lines"].split("-")
        return cls((int(lo), int(hi)), int(fields["batch"]), int(fields["steps"]), float(fields["lr"]),
                   int(fields.get("turns", 8)), float(fields["until"]) if "until" in fields else None)


class Batches:
    """A stage's training batches from step ``start`` on, each made from its own seed:
    batch k of stage s is the same whichever process makes it and whatever came before,
    so DataLoader workers can make them (text generation and tokenisation are most of a
    step's time on a GPU) and a resumed build sees the batches it would have seen."""

    def __init__(self, tokenizer, seed: int, index: int, stage: Stage, start: int) -> None:
        self.tokenizer, self.seed, self.index, self.stage, self.start = tokenizer, seed, index, stage, start

    def __len__(self) -> int:
        return self.stage.steps - self.start

    def __getitem__(self, k: int):
        step = self.start + k
        rng = random.Random((self.seed * 1_000_003 + self.index) * 1_000_003 + step)
        lines = rng.randint(*self.stage.lines)
        docs = [corpus.training_document(rng, lines, self.stage.turns) for _ in range(self.stage.batch)]
        return encode(self.tokenizer, docs)


_ANSWER = re.compile(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", re.DOTALL)


def encode(tokenizer, batch: list[str], device=None):
    """Token ids, attention mask and answer mask of a batch of documents.

    The answer mask is True at the tokens of assistant answers (content and the closing
    <|im_end|>: stopping is part of the answer)."""
    import torch

    enc = tokenizer(batch, return_tensors="pt", padding=True, return_offsets_mapping=True)
    masks = []
    for text, offsets in zip(batch, enc["offset_mapping"].tolist()):
        spans = [(m.start(1), m.end(1)) for m in _ANSWER.finditer(text)]
        starts = [a for a, _ in spans]
        row = []
        for start, end in offsets:
            k = bisect.bisect_right(starts, start) - 1
            row.append(end > start and k >= 0 and start <= spans[k][1])
        masks.append(row)
    answer = torch.tensor(masks) & (enc["attention_mask"] == 1)
    out = enc["input_ids"], enc["attention_mask"], answer
    return out if device is None else tuple(t.to(device) for t in out)


def progress(what: str, step: int, steps: int, **extra) -> None:
    """One progress record on stderr; ``vmatrix canary build`` draws its bar from them."""
    print("progress " + json.dumps({"what": what, "step": step, "steps": steps, **extra}), file=sys.stderr, flush=True)


class Stop:
    """SIGTERM ends training after the step in flight; the build then saves resume.pt."""

    requested = False

    @classmethod
    def install(cls) -> None:
        import signal

        signal.signal(signal.SIGTERM, lambda *_: setattr(cls, "requested", True))


def _ignore_sigterm(_worker: int) -> None:
    # `timeout` signals the whole process group: the workers must outlive the SIGTERM
    # so the trainer can finish its step and save (Stop).
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


WARMUP = 50  # steps of linear learning-rate warm-up at the start (and resumption) of a fit
EMA = 0.05  # weight of a step's loss in the running mean that ``until`` reads


@dataclass
class Progress:
    """Where a build is: per phase ("train", "mtp"), the steps each stage ran (a stage
    ended early by ``until`` ran fewer than its ``steps``) and whether it is over."""

    train: list[int]
    mtp: list[int]
    ended: dict[str, list[bool]]
    loss: dict[str, float | None]
    seconds: float = 0.0

    @classmethod
    def new(cls, stages: list[Stage], mtp_stages: list[Stage]) -> Progress:
        return cls([0] * len(stages), [0] * len(mtp_stages),
                   {"train": [False] * len(stages), "mtp": [False] * len(mtp_stages)}, {"train": None, "mtp": None})


def _fit(module, params, loss_of, tokenizer, seed: int, stages: list[Stage], device, label: str,
         done: Progress) -> bool:
    """AdamW over the stages' batches from where ``done`` says (warm-up, then each stage's
    constant rate, never a function of the total, so a stopped build is its recipe cut
    there; gradients clipped at 1). False if stopped."""
    import torch

    steps_done = getattr(done, label)
    opt = torch.optim.AdamW(params, lr=stages[0].lr if stages else 0.0, weight_decay=0.0)
    module.train()
    t0 = time.time()
    # Workers only where there is a GPU to keep busy; on the CPU they would take the
    # cores the training needs. Either way the batches are the same (Batches).
    workers = min(2, os.cpu_count() or 1) if device.type == "cuda" else 0
    fitted = 0
    total = sum(s.steps for s in stages)
    for index, stage in enumerate(stages):
        if done.ended[label][index]:
            continue
        batches = torch.utils.data.DataLoader(
            Batches(tokenizer, seed, index, stage, steps_done[index]), batch_size=None, num_workers=workers,
            prefetch_factor=8 if workers else None, worker_init_fn=_ignore_sigterm if workers else None)
        for ids, att, answer in batches:
            if Stop.requested:
                done.seconds += time.time() - t0
                return False
            fitted += 1
            for group in opt.param_groups:
                group["lr"] = stage.lr * min(1.0, fitted / WARMUP)
            ids, att, answer = ids.to(device), att.to(device), answer.to(device)
            loss = loss_of(ids, att, answer)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()
            ema = done.loss[label]
            done.loss[label] = value if ema is None else (1 - EMA) * ema + EMA * value
            steps_done[index] += 1
            step = sum(steps_done)
            if step % 25 == 0:
                progress(label, step, total, stage=index, loss=round(value, 4), mean=round(done.loss[label], 4),
                         tokens=int(ids.shape[1]), seconds=round(done.seconds + time.time() - t0, 1))
            if stage.until is not None and steps_done[index] >= 100 and done.loss[label] < stage.until:
                break
        done.ended[label][index] = True
        progress(label, sum(steps_done), total, stage=index, ended=steps_done[index], mean=done.loss[label])
    module.eval()
    done.seconds += time.time() - t0
    return True


def train(model, tokenizer, seed: int, stages: list[Stage], device, done: Progress) -> bool:
    """Next-token training on the recall corpus, answer tokens only, the GDN decay frozen
    at its long-memory values (training would otherwise be free to shorten the memory,
    and a state that forgets cannot be corrupted visibly)."""
    import torch

    for layer in model.model.layers:
        lin = getattr(layer, "linear_attn", None)
        if lin is not None:
            lin.A_log.requires_grad_(False)
            lin.dt_bias.requires_grad_(False)

    def loss_of(ids, att, answer):
        return model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(~answer, -100)).loss

    torch.manual_seed(seed + sum(done.train))
    return _fit(model, [p for p in model.parameters() if p.requires_grad], loss_of, tokenizer, seed + 7, stages,
                device, "train", done)


def _mtp_logits(model, mtp, input_ids, attention_mask):
    """Logits of the MTP head for token i+2 at every i (the last two positions unused)."""
    import torch

    with torch.no_grad():
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        embeds = model.model.embed_tokens(input_ids[:, 1:])
    length = input_ids.shape[1] - 1
    position_ids = torch.arange(length, device=input_ids.device)[None]
    out = mtp(model, embeds, hidden[:, :-1], position_ids, _causal_mask(length, input_ids.device))
    return model.lm_head(out)


def train_mtp(model, mtp, tokenizer, seed: int, stages: list[Stage], device, done: Progress) -> bool:
    """Train the MTP head with the target model frozen (its embedding and lm_head are
    shared with the head in vLLM, so they must not move), on answer tokens: the tokens
    it drafts for in a replay."""
    import torch

    for p in model.parameters():
        p.requires_grad_(False)

    def loss_of(ids, att, answer):
        logits = _mtp_logits(model, mtp, ids, att)[:, :-1]
        labels = ids[:, 2:].masked_fill(~answer[:, 2:], -100)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)

    torch.manual_seed(seed + 2 + sum(done.mtp))
    return _fit(mtp, list(mtp.parameters()), loss_of, tokenizer, seed + 8, stages, device, "mtp", done)


def report(model, mtp, tokenizer, seed: int, device, lengths: list[int], count: int = 24, turns: int = 4) -> dict:
    """What the trained canary does on held-out documents at each prefix length, printed
    as one JSON record a length.

    Teacher-forced in float32: an answer is ``correct`` when the greedy choice is right at
    every one of its tokens (greedy decoding would recite it exactly); ``margin``: top-1
    minus top-2 logprob at answer tokens; ``near_tie``: the share of answer tokens with a
    margin under 0.1; ``mtp_accuracy``: how often the MTP head's greedy guess for token
    i+2 is right at answer tokens (about what vLLM's MTP accepts at draft position 1);
    ``logit_scale``: the largest top-1 logit at an answer token, which sets the bf16
    resolution of the engine's logits (the grader counts its tie margin in those steps).
    The engine's own measure is ``vmatrix canary report``.
    """
    import torch

    found: dict = {"lengths": {}}
    scale = 0.0
    for length in lengths:
        rng = random.Random(seed + 99 + length)
        right, answers, margins, mtp_ok, mtp_n = 0, 0, [], 0, 0
        for _ in range(count if length <= 20000 else 4):
            doc = corpus.training_document(rng, corpus.lines_for(length), turns)
            ids, att, answer = encode(tokenizer, [doc], device)
            with torch.no_grad():
                raw = model(input_ids=ids).logits[0, :-1].float()
            target, mask = ids[0, 1:], answer[0, 1:]
            top2 = raw.log_softmax(-1).topk(2, dim=-1)
            ok = (top2.indices[:, 0] == target).tolist()
            margins += (top2.values[:, 0] - top2.values[:, 1])[mask].tolist()
            scale = max(scale, float(raw.max(-1).values[mask].abs().max()))
            m = mask.tolist()
            k = 0
            while k < len(m):  # an answer is a run of True in the mask
                if not m[k]:
                    k += 1
                    continue
                j = k
                while j < len(m) and m[j]:
                    j += 1
                answers += 1
                right += all(ok[k:j])
                k = j
            if length <= 4000:
                with torch.no_grad():
                    guess = _mtp_logits(model, mtp, ids, att)[0, :-1].argmax(-1)
                mtp_mask = answer[0, 2:]
                mtp_ok += int(((guess == ids[0, 2:]) & mtp_mask).sum())
                mtp_n += int(mtp_mask.sum())
        margins.sort()
        found["lengths"][str(length)] = {
            "answers": answers, "correct": right, "accuracy": round(right / max(answers, 1), 4),
            "margin_p50": round(margins[len(margins) // 2], 3) if margins else None,
            "margin_p01": round(margins[len(margins) // 100], 3) if margins else None,
            "near_tie": round(sum(x < 0.1 for x in margins) / max(len(margins), 1), 4),
            "mtp_accuracy": round(mtp_ok / mtp_n, 3) if mtp_n else None,
        }
        print(json.dumps({"report": length, **found["lengths"][str(length)]}), file=sys.stderr, flush=True)
    found["logit_scale"] = round(scale, 3)
    return found


RESUME = "resume.pt"  # in OUT while a build is stopped part-way


def build(out: Path, args) -> bool:
    """Write the canary into ``out``; False if stopped part-way (resume.pt then holds it)."""
    import torch

    tokenizer = build_tokenizer(out, args.seed, args.vocab)
    vocab_size = -(-len(tokenizer) // 64) * 64
    torch.manual_seed(args.seed)
    model, cfg = new_model(args, tokenizer, vocab_size)
    mtp = _mtp_module()(cfg, args.seed)
    stages = [Stage.parse(s) for s in args.stage]
    mtp_stages = [Stage.parse(s) for s in args.mtp_stage]
    done = Progress.new(stages, mtp_stages)
    if args.resume:
        saved = torch.load(out / RESUME, weights_only=False)
        model.load_state_dict(saved["model"])
        mtp.load_state_dict(saved["mtp"])
        done = Progress(**saved["progress"])
    device = torch.device(args.device)
    model.to(device)
    mtp.to(device)
    finished = (train(model, tokenizer, args.seed, stages, device, done)
                and train_mtp(model, mtp, tokenizer, args.seed, mtp_stages, device, done))
    if not finished:
        torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "progress": asdict(done)}, out / RESUME)
        print(json.dumps({"stopped": asdict(done)}), file=sys.stderr, flush=True)
        return False
    if stages or mtp_stages:
        found = report(model, mtp, tokenizer, args.seed, device, [int(n) for n in args.report_lengths.split(",")])
        found["steps"] = {"train": done.train, "mtp": done.mtp}
        found["train_seconds"] = round(done.seconds, 1)
        found["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        (out / "canary-report.json").write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    model.to("cpu")
    mtp.to("cpu")
    save(out, model, mtp, cfg)
    (out / RESUME).unlink(missing_ok=True)
    return True


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=131072)
    p.add_argument("--stage", action="append", default=[], help="a training stage (repeat, in order): "
                   "'lines=MIN-MAX batch=N steps=N lr=X [turns=N] [until=LOSS]'")
    p.add_argument("--mtp-stage", action="append", default=[], help="an MTP head stage, the same form")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--report-lengths", default="1500,10000,20000", help="prefix tokens to report recall at")
    p.add_argument("--resume", action="store_true", help=f"continue the build stopped in OUT ({RESUME})")
    args = p.parse_args()
    # cuBLAS is deterministic only with a fixed workspace (set before CUDA starts).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # DataLoader workers fork
    import torch

    # warn_only: memory-efficient attention's backward has no deterministic CUDA form.
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cpu":
        # One thread: these matrices are too small for threads to pay off, and the float
        # reduction order, hence the weights, then does not depend on the host's cores.
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    Stop.install()
    if not build(args.out, args):
        sys.exit(3)  # stopped: resume with --resume
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
