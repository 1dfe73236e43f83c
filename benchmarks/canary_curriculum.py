"""The canary trained to recall at the replays' lengths: an experiment, not part of the build.

Run where torch and transformers are (an engine venv here, or the lent H200 through
benchmarks/canary_gpu.sh):

    python benchmarks/canary_curriculum.py OUT --device cuda --seed 0 \
        --stages 2-12:64:2500:3e-3,12-120:16:800:2e-3,120-600:4:400:1.5e-3,600-1700:2:300:1e-3

What it changes against images/canary/build_canary.py (whose model, MTP head and
checkpoint writer it uses), and why (images/canary/README.md has the measurements):
- the language: identifiers ``var_NNNN`` unique at any length (10,000 of them) with
  digits tokenised one by one, and one-line answers, so every answer is defined and
  short enough for the replays' ``max_tokens``;
- a length curriculum (``--stages MIN-MAX:BATCH:STEPS[:LR]``, definitions a document):
  recall appears on short documents, then must carry to 1.5k-21k tokens;
- loss on answer tokens only; batches made in DataLoader workers, each from its own
  seed (the same batches whatever process makes them);
- a constant rate per stage after a warm-up, and SIGTERM stops after the step in flight
  and saves: a time-boxed run on a lent GPU is its recipe with the stages cut there;
- ``--init`` continues an earlier checkpoint; ``--names`` tries other tokenisations.
On 2026-12-01 recall appeared in one H200 run (answer loss 1.38 -> 0.003 between steps
~1,000 and 2,000, seed 0) and not in its rerun; no run reached the long stages. Adopting
it means moving it into the builder, retraining, shipping and re-measuring the grader.
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
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "images" / "canary"))
import build_canary as builder  # the model, its MTP head and the checkpoint writer
import corpus

NAMES = 10000  # var_0000 .. var_9999: about 125k tokens of definitions


def definitions(rng: random.Random, count: int) -> list[str]:
    """``count`` definition lines, each under its own name, so the answer to "show var_0042"
    is defined at any length; four digits, tokenised one by one."""
    if count > NAMES:
        raise ValueError(f"at most {NAMES} definitions (asked {count})")
    return [f"var_{n:04d} = " + " ".join(rng.choice(corpus.WORDS) for _ in range(rng.randint(3, 6)))
            for n in rng.sample(range(NAMES), count)]


def document(rng: random.Random, lines: int, turns: int) -> str:
    """A training (or held-out) document: the system prompt, then ``turns`` questions each
    answered by the one definition line it names."""
    defs = definitions(rng, lines)
    messages = [("system", "\n".join([corpus.HEADER, "tools: " + " ".join(corpus.TOOLS), *defs]))]
    for t in range(turns):
        user, i = corpus.user_turn(rng, defs, t)
        messages += [("user", user), ("assistant", corpus.answer(defs, i, lines=1))]
    return corpus.chat(messages)


def documents(seed: int, count: int, lines: tuple[int, int] = (4, 16), turns: int = 4) -> list[str]:
    rng = random.Random(seed)
    return [document(rng, rng.randint(*lines), turns) for _ in range(count)]


@dataclass(frozen=True)
class Stage:
    """One step of the length curriculum: documents of ``lines`` definitions, ``batch``
    of them a step (all of one length, so padding costs nothing), for ``steps`` steps at
    learning rate ``lr`` (None: the builder's ``--lr``)."""

    lines: tuple[int, int]
    batch: int
    steps: int
    lr: float | None = None

    @classmethod
    def parse(cls, text: str) -> list[Stage]:
        """``MIN-MAX:BATCH:STEPS[:LR],...`` -> stages."""
        out = []
        for part in text.split(","):
            span, batch, steps, *lr = part.split(":")
            lo, hi = span.split("-")
            out.append(cls((int(lo), int(hi)), int(batch), int(steps), float(lr[0]) if lr else None))
        return out


class Batches:
    """The curriculum's training batches, step by step, each from its own seed: batch
    ``k`` is the same whichever process makes it and whatever came before, so torch's
    DataLoader can make them in worker processes (text generation and tokenisation are
    most of a step's time on a GPU) without changing a single token."""

    def __init__(self, tokenizer, seed: int, stages: list[Stage], turns: int) -> None:
        self.tokenizer, self.seed, self.turns = tokenizer, seed, turns
        self.plan = [stage for stage in stages for _ in range(stage.steps)]

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, step: int):
        stage = self.plan[step]
        rng = random.Random(self.seed * 1_000_003 + step)
        lines = rng.randint(*stage.lines)
        return encode(self.tokenizer, [document(rng, lines, self.turns) for _ in range(stage.batch)])


def build_tokenizer(out: Path, seed: int, vocab: int, names: str = "digits"):
    """A byte-level BPE of the canary's language. ``names``: how an identifier is
    tokenised: ``digits``, ``var_`` and its four digits one by one; ``pairs``, ``var_``
    and two two-digit tokens (100 added tokens); ``single``, one token per identifier
    (10,000 added tokens, each rarely seen in training)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits one by one: every var_NNNN is the same tokens, whatever BPE learned.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=builder.SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(documents(seed, 400), trainer=trainer)
    if names == "pairs":
        tok.add_tokens([AddedToken(f"{n:02d}", normalized=False) for n in range(100)])
    if names == "single":
        tok.add_tokens([AddedToken(f"var_{n:04d}", normalized=False) for n in range(NAMES)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = builder.CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, seed: int, args, tokenizer, vocab_size: int) -> None:
    import torch
    from transformers import Qwen3NextForCausalLM

    torch.manual_seed(seed)
    if args.init:
        # Warm start: the target model of an earlier build (its tokenizer is already
        # copied into OUT); the MTP head is trained anew for the model it drafts for.
        model = Qwen3NextForCausalLM.from_pretrained(args.init, dtype=torch.float32)
        cfg = model.config
    else:
        model, cfg = builder.new_model(args, tokenizer, vocab_size)
    mtp = builder._mtp_module()(cfg, seed)
    device = torch.device(args.device)
    model.to(device)
    mtp.to(device)
    stages, mtp_stages = Stage.parse(args.stages) if args.stages else [], Stage.parse(args.mtp_stages) if args.mtp_stages else []
    if stages:
        train(model, tokenizer, args, seed, stages, device)
    if mtp_stages and not Stop.requested:
        train_mtp(model, mtp, tokenizer, args, seed, mtp_stages, device)
    if Stop.requested:
        found = {"stopped": dict(Stop.at)}
        print(json.dumps(found), file=sys.stderr, flush=True)
        (out / "canary-report.json").write_text(json.dumps(found, indent=2, sort_keys=True))
    elif stages or mtp_stages:
        found = report(model, mtp, tokenizer, seed, device, [int(n) for n in args.report_lengths.split(",")])
        (out / "canary-report.json").write_text(json.dumps(found, indent=2, sort_keys=True))
    model.to("cpu")
    mtp.to("cpu")
    builder.save(out, model, mtp, cfg)


def _causal_mask(length: int, device=None):
    import torch

    return torch.full((length, length), float("-inf"), device=device).triu(1)[None, None]


def progress(what: str, step: int, steps: int, **extra) -> None:
    """One progress line on stderr; ``vmatrix canary build`` turns these into a bar."""
    print("progress " + json.dumps({"what": what, "step": step, "steps": steps, **extra}), file=sys.stderr, flush=True)


def encode(tokenizer, batch: list[str], device=None):
    """Token ids, attention mask and answer mask of a batch of documents.

    The answer mask is True at the tokens of assistant answers (content and the closing
    <|im_end|>: stopping is part of the answer). Loss is taken there only: the
    definitions are random words no model can predict, and learning to guess them
    would spend the canary's few parameters on noise instead of recall."""
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
    if device is None:
        return enc["input_ids"], enc["attention_mask"], answer
    return enc["input_ids"].to(device), enc["attention_mask"].to(device), answer.to(device)


WARMUP = 50  # steps of linear learning-rate warm-up at the start of each fit


class Stop:
    """SIGTERM ends training after the step in flight, and the build saves what it has.

    The schedule is warm-up then each stage's constant rate, never a function of the
    total: so a build stopped after step k holds exactly what the recipe with its stages
    cut at step k makes, and a time-boxed run on a lent GPU is still a reproducible recipe.
    """

    requested = False
    at: ClassVar[dict[str, int]] = {}

    @classmethod
    def install(cls) -> None:
        import signal

        signal.signal(signal.SIGTERM, lambda *_: setattr(cls, "requested", True))


def _ignore_sigterm(_worker: int) -> None:
    # `timeout` signals the whole process group: the workers must outlive the SIGTERM
    # so the trainer can stop after its step and save (Stop).
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _fit(module, params, loss_of, tokenizer, args, seed: int, stages: list[Stage], device, label: str) -> None:
    """AdamW over the curriculum's batches (warm-up, then each stage's constant learning
    rate; gradients clipped at 1); ``module`` trains meanwhile."""
    import torch

    steps = sum(s.steps for s in stages)
    rates = [stage.lr or args.lr for stage in stages for _ in range(stage.steps)]
    opt = torch.optim.AdamW(params, lr=rates[0] if rates else args.lr, weight_decay=0.0)
    module.train()
    t0 = time.time()
    # Workers only where there is a GPU to keep busy; on the CPU they would take the
    # cores the training needs. Either way the batches are the same (Batches).
    workers = min(8, os.cpu_count() or 1) if device.type == "cuda" else 0
    batches = torch.utils.data.DataLoader(Batches(tokenizer, seed, stages, args.turns), batch_size=None,
                                          num_workers=workers, prefetch_factor=8 if workers else None,
                                          worker_init_fn=_ignore_sigterm if workers else None)
    done = 0
    for step, (ids, att, answer) in enumerate(batches):
        if Stop.requested:
            break
        for group in opt.param_groups:
            group["lr"] = rates[step] * min(1.0, (step + 1) / WARMUP)
        ids, att, answer = ids.to(device), att.to(device), answer.to(device)
        loss = loss_of(ids, att, answer)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        done = step + 1
        if step % 25 == 0 or step == steps - 1:
            progress(label, step + 1, steps, loss=round(loss.item(), 4), tokens=int(ids.shape[1]),
                     seconds=round(time.time() - t0, 1))
    Stop.at[label] = done
    module.eval()


def train(model, tokenizer, args, seed: int, stages: list[Stage], device) -> None:
    """Next-token training on the recall corpus, answers only, over a length curriculum:
    short documents first (recall is learnt there in minutes), then the prefix lengths the
    replays use, so the canary recalls at 1.5k-20k tokens and not only at its training
    length.

    The GDN decay parameters stay frozen at their long-memory values: training would
    otherwise be free to shorten the memory, and a state that forgets cannot be
    corrupted visibly. Seeded data order; on the CPU single-threaded reductions.
    """
    import torch

    torch.manual_seed(seed)
    for layer in model.model.layers:
        lin = getattr(layer, "linear_attn", None)
        if lin is not None:
            lin.A_log.requires_grad_(False)
            lin.dt_bias.requires_grad_(False)

    def loss_of(ids, att, answer):
        return model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(~answer, -100)).loss

    _fit(model, [p for p in model.parameters() if p.requires_grad], loss_of, tokenizer, args, seed + 7, stages,
         device, "train")


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


def train_mtp(model, mtp, tokenizer, args, seed: int, stages: list[Stage], device) -> None:
    """Train the MTP head with the target model frozen (its embedding and lm_head are
    shared with the head in vLLM, so they must not move), on answer tokens: the only
    tokens it drafts for in a replay."""
    import torch

    torch.manual_seed(seed + 2)
    for p in model.parameters():
        p.requires_grad_(False)

    def loss_of(ids, att, answer):
        logits = _mtp_logits(model, mtp, ids, att)[:, :-1]
        labels = ids[:, 2:].masked_fill(~answer[:, 2:], -100)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)

    _fit(mtp, list(mtp.parameters()), loss_of, tokenizer, args, seed + 8, stages, device, "mtp")


_ANSWER = re.compile(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", re.DOTALL)


def tokens_per_line(tokenizer, seed: int) -> float:
    """Tokens per definition line of the canary's language, with this tokenizer."""
    rng = random.Random(seed)
    defs = definitions(rng, 200)
    return len(tokenizer("\n".join(defs))["input_ids"]) / len(defs)


def report(model, mtp, tokenizer, seed: int, device, lengths: list[int], count: int = 24, turns: int = 4) -> dict:
    """What the trained canary can do on held-out documents, at each prefix length.

    Teacher-forced through transformers in float32: an answer is ``correct`` when the
    greedy choice is right at every one of its tokens (so greedy decoding would recite
    it exactly); ``margin``: top-1 minus top-2 logprob at answer tokens; ``near_tie``:
    the share of answer tokens with a margin under 0.1; ``logit_scale``: the largest
    top-1 logit at an answer token, which sets the bf16 resolution the engine's logits
    have (the grader's tie margin is counted in its steps); ``mtp_accuracy``: how often
    the MTP head's greedy guess for token i+2 is right at answer tokens (about what
    vLLM's MTP accepts at draft position 1).
    """
    import torch

    per_line = tokens_per_line(tokenizer, seed + 98)
    found: dict = {"tokens_per_line": round(per_line, 2), "lengths": {}}
    scale = 0.0
    for length in lengths:
        rng = random.Random(seed + 99 + length)
        right, answers, margins, mtp_ok, mtp_n = 0, 0, [], 0, 0
        n = count if length <= 20000 else max(4, count // 6)
        for _ in range(n):
            doc = document(rng, max(4, int(length / per_line)), turns)
            ids, att, answer = encode(tokenizer, [doc], device)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=att).logits[0, :-1].float()
            target, mask = ids[0, 1:], answer[0, 1:]
            top2 = logits.topk(2, dim=-1)
            ok = top2.indices[:, 0] == target
            margins += (top2.values[:, 0] - top2.values[:, 1])[mask].tolist()
            scale = max(scale, float(top2.values[:, 0][mask].abs().max()))
            # answers are the runs of True in the mask
            m = mask.tolist()
            k = 0
            while k < len(m):
                if m[k]:
                    j = k
                    while j < len(m) and m[j]:
                        j += 1
                    answers += 1
                    right += bool(ok[k:j].all())
                    k = j
                else:
                    k += 1
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=131072)
    p.add_argument("--stages", default="", help="model curriculum: MIN-MAX:BATCH:STEPS,... (definitions a document)")
    p.add_argument("--mtp-stages", default="", help="MTP head curriculum, the same form")
    p.add_argument("--turns", type=int, default=8, help="question/answer turns per training document")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--names", choices=("digits", "pairs", "single"), default="digits", help="how identifiers tokenise")
    p.add_argument("--init", type=Path, default=None, help="continue training the model of this earlier build")
    p.add_argument("--device", default="cpu", help="cpu or cuda (the recipe of the shipped canary says which)")
    p.add_argument("--report-lengths", default="1500,10000,20000", help="prefix tokens to report recall at")
    args = p.parse_args()
    # cuBLAS is deterministic only with a fixed workspace (set before CUDA starts).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # DataLoader workers fork
    import torch

    # warn_only: a few CUDA ops (and Triton kernels, which this does not reach) have no
    # deterministic form; the rest are made deterministic.
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cpu":
        # One thread: these matrices are too small for threads to pay off (measured: 1
        # thread is faster than 2 here), and the float reduction order, hence the
        # trained weights, then does not depend on how many cores the building host has.
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    Stop.install()
    if args.init:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.init)
        tok.save_pretrained(args.out)
    else:
        tok = build_tokenizer(args.out, args.seed, args.vocab, args.names)
    vocab_size = -(-len(tok) // 64) * 64
    build_model(args.out, args.seed, args, tok, vocab_size)
    print(json.dumps({"out": str(args.out), "vocab_size": vocab_size, "tokens": len(tok)}))


if __name__ == "__main__":
    main()
