"""Write a tiny DFlash or DFlash2 drafter for a canary and train it on the canary's own
hidden states, reproducibly (CPU, one thread, a fixed seed).

Runs *inside an engine venv* (its own torch, transformers, safetensors), so it must not
import vmatrix. Usage:

    python build_drafter.py OUT --target CANARY_DIR --kind dflash|dflash2 --seed 0 \
        --docs 192 --steps 1500 [--block 5]

``--steps 0`` writes the untrained drafter (its shapes only). What vLLM loads, and why
each choice below (vllm/model_executor/models/qwen3_dflash.py and qwen3_dflash2.py of
vllm 0.32.0; images/canary/README.md):
- ``architectures: [DFlashDraftModel]`` or ``[DFlash2DraftModel]``, ``model_type:
  qwen3``: one Qwen3-style decoder layer (q/k/v/o projections, per-head q/k RMSNorm,
  SiLU MLP) that reads the target's hidden states through ``fc`` + ``hidden_norm``;
- ``dflash_config.target_layer_ids``: the target layers whose outputs (residual stream,
  before the final norm) vLLM captures for ``fc`` (aux layer id = target id + 1 in
  vLLM's Qwen3-Next capture). Layers 1 and 3 of the canary: the last is the attention
  layer that finds the recalled line, the other a GDN layer;
- no ``embed_tokens`` or ``lm_head`` in the checkpoint: vLLM then shares the target's
  (the draft's hidden size is the target's), so they are the canary's, frozen here;
- ``dflash_config.mask_token_id``: 511, a row of the canary's embedding no token of its
  tokenizer (468 tokens) uses, so it never collides with text;
- a DFlash draft step: the context is the target's states at positions < n (their K/V
  are ``k_proj``/``v_proj`` of ``hidden_norm(fc(aux))``, k-normed and rotated, written
  once into the draft's cache), the query block is [the bonus token at n, then
  ``block - 1`` mask tokens], attention within the block is not causal, and the output
  at mask slot j is the draft for the token at n + j (the block is the trained
  ``num_speculative_tokens`` + 1: serve it with k = block - 1);
- DFlash2 adds per-layer grouped convolutions over the query block around attention and
  the MLP (``attention_conv``, ``mlp_conv``: causal within the block, kernels predicted
  per token) and a candidate selector (predecessor/successor codebooks and a hidden
  projection) that rescores the top-k candidates of a slot by the token before it. The
  selector is trained teacher-forced (the true predecessor), the full-vocabulary form
  of vLLM's top-k edge score;
- loss on answer tokens only (what a replay drafts for), AdamW, answer positions of
  held-out documents for the report.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # standard library only, shared with the replay workloads

MASK_TOKEN = 511
TARGET_LAYERS = (1, 3)
ARCHITECTURES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}
DFLASH2 = {"selector_top_k": 4, "selector_rank": 16, "conv_kernel_size": 3, "conv_group_size": 16}


def draft_config(target: dict, kind: str, block: int) -> dict:
    """The drafter's config.json: the target's attention geometry, one layer."""
    dflash = {"target_layer_ids": list(TARGET_LAYERS), "mask_token_id": MASK_TOKEN}
    if kind == "dflash2":
        dflash |= DFLASH2
    return {
        "architectures": [ARCHITECTURES[kind]],
        "model_type": "qwen3",
        "hidden_size": target["hidden_size"],
        "target_hidden_size": target["hidden_size"],
        "intermediate_size": target["intermediate_size"],
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "num_hidden_layers": 1,
        "vocab_size": target["vocab_size"],
        "rms_norm_eps": target["rms_norm_eps"],
        "max_position_embeddings": target["max_position_embeddings"],
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "dtype": "float32",
        "block_size": block,
        "dflash_config": dflash,
    }


def _modules(cfg: dict, kind: str):
    import torch
    from torch import nn

    h, hd = cfg["hidden_size"], cfg["head_dim"]
    nq, nkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]

    class RMSNorm(nn.Module):
        """vLLM's RMSNorm: x / rms(x) * weight (weight starts at 1)."""

        def __init__(self, n: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight

    class GroupedConv(nn.Module):
        """vLLM's DFlashGroupedConv (the CPU form of _grouped_conv), on [M, B, H] blocks."""

        def __init__(self, taps: int, group: int) -> None:
            super().__init__()
            self.taps, self.groups, self.group = taps, h // group, group
            base = torch.zeros(2, taps, h)
            base[:, 0] = 1.0  # starts as the identity: the plain DFlash layer
            self.base_kernel = nn.Parameter(base)
            self.kernel_projection = nn.Linear(h, 2 * taps * self.groups, bias=False)
            nn.init.normal_(self.kernel_projection.weight, 0.0, 0.002)

        def _conv(self, x, delta, side: int):
            blocks = x.unflatten(-1, (self.groups, self.group))
            coef = self.base_kernel[side].view(1, 1, self.taps, self.groups, self.group) + delta.unsqueeze(-1)
            out = coef[:, :, 0] * blocks
            for tap in range(1, self.taps):
                shifted = torch.nn.functional.pad(blocks[:, :-tap], (0, 0, 0, 0, tap, 0))
                out = out + coef[:, :, tap] * shifted
            return out.flatten(-2)

        def prepare(self, x):
            coef = self.kernel_projection(x).reshape(*x.shape[:2], 2, self.taps, self.groups)
            return self._conv(x, coef[:, :, 0], 0), coef[:, :, 1]

        def finish(self, x, coef):
            return self._conv(x, coef, 1)

    def rope(x, pos):
        """Neox-style rotary embedding over the whole head (rope_theta 10000)."""
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = pos.float()[..., None] * inv
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        while cos.dim() < x.dim():
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = nn.Module()
            a = self.self_attn
            a.q_proj = nn.Linear(h, nq * hd, bias=False)
            a.k_proj = nn.Linear(h, nkv * hd, bias=False)
            a.v_proj = nn.Linear(h, nkv * hd, bias=False)
            a.o_proj = nn.Linear(nq * hd, h, bias=False)
            a.q_norm, a.k_norm = RMSNorm(hd), RMSNorm(hd)
            self.mlp = nn.Module()
            self.mlp.gate_proj = nn.Linear(h, cfg["intermediate_size"], bias=False)
            self.mlp.up_proj = nn.Linear(h, cfg["intermediate_size"], bias=False)
            self.mlp.down_proj = nn.Linear(cfg["intermediate_size"], h, bias=False)
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(h), RMSNorm(h)
            if kind == "dflash2":
                d = cfg["dflash_config"]
                self.attention_conv = GroupedConv(d["conv_kernel_size"], d["conv_group_size"])
                self.mlp_conv = GroupedConv(d["conv_kernel_size"], d["conv_group_size"])
            for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, self.mlp.gate_proj, self.mlp.up_proj,
                        self.mlp.down_proj):
                nn.init.normal_(lin.weight, 0.0, 0.02)

        def context_kv(self, ctx, pos):
            """K/V of the context states (already hidden_norm'ed), as vLLM precomputes them."""
            a = self.self_attn
            k = a.k_norm(a.k_proj(ctx).unflatten(-1, (nkv, hd)))
            return rope(k, pos), a.v_proj(ctx).unflatten(-1, (nkv, hd))

        def attend(self, x, pos, ctx_k, ctx_v, ctx_ok):
            """x: [M, B, H] query blocks at positions pos [M, B]; ctx_k/v: [T, nkv, hd];
            ctx_ok: [M, T], which context positions each block sees."""
            a = self.self_attn
            q = rope(a.q_norm(a.q_proj(x).unflatten(-1, (nq, hd))), pos)
            k = rope(a.k_norm(a.k_proj(x).unflatten(-1, (nkv, hd))), pos)
            v = a.v_proj(x).unflatten(-1, (nkv, hd))
            rep = nq // nkv
            kc, vc = ctx_k.repeat_interleave(rep, 1), ctx_v.repeat_interleave(rep, 1)
            kb, vb = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
            s_ctx = torch.einsum("mbhd,thd->mhbt", q, kc) * hd ** -0.5
            s_ctx = s_ctx.masked_fill(~ctx_ok[:, None, None, :], float("-inf"))
            s_blk = torch.einsum("mbhd,mchd->mhbc", q, kb) * hd ** -0.5  # not causal in the block
            w = torch.cat([s_ctx, s_blk], -1).softmax(-1)
            t = ctx_k.shape[0]
            out = torch.einsum("mhbt,thd->mbhd", w[..., :t], vc) + torch.einsum("mhbc,mchd->mbhd", w[..., t:], vb)
            return a.o_proj(out.flatten(-2))

        def forward(self, x, residual, pos, ctx_k, ctx_v, ctx_ok):
            residual = x if residual is None else x + residual
            y = self.input_layernorm(residual)
            if kind == "dflash2":
                y, coef = self.attention_conv.prepare(y)
            y = self.attend(y, pos, ctx_k, ctx_v, ctx_ok)
            if kind == "dflash2":
                y = self.attention_conv.finish(y, coef)
            residual = y + residual
            y = self.post_attention_layernorm(residual)
            if kind == "dflash2":
                y, coef = self.mlp_conv.prepare(y)
            y = self.mlp.down_proj(torch.nn.functional.silu(self.mlp.gate_proj(y)) * self.mlp.up_proj(y))
            if kind == "dflash2":
                y = self.mlp_conv.finish(y, coef)
            return y, residual

    class Selector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg["dflash_config"]
            self.predecessor_codebook = nn.Parameter(torch.randn(cfg["vocab_size"], d["selector_rank"]) * 0.02)
            self.successor_codebook = nn.Parameter(torch.randn(cfg["vocab_size"], d["selector_rank"]) * 0.02)
            self.hidden_projection = nn.Linear(h, d["selector_rank"], bias=False)
            nn.init.normal_(self.hidden_projection.weight, 0.0, 0.02)

        def forward(self, unary, hidden, prev):
            """Every token's edge score after the true predecessor ``prev``: vLLM's
            _score_edges over the whole vocabulary instead of the top-k."""
            p = self.predecessor_codebook[prev] * self.hidden_projection(hidden)
            return unary + p @ self.successor_codebook.T

    class Drafter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(len(TARGET_LAYERS) * h, h, bias=False)
            nn.init.normal_(self.fc.weight, 0.0, 0.02)
            self.hidden_norm, self.norm = RMSNorm(h), RMSNorm(h)
            self.layers = nn.ModuleList([Layer()])
            if kind == "dflash2":
                self.candidate_selector = Selector()

        def forward(self, aux, anchors, block_ids, embed):
            """aux: [T, A*H] target states of one document; anchors: [M] bonus positions;
            block_ids: [M, B] (bonus token, masks); embed: the target's embedding. The
            hidden states of each block, [M, B, H], before lm_head."""
            t = aux.shape[0]
            ctx = self.hidden_norm(self.fc(aux))
            ctx_pos = torch.arange(t)
            ctx_ok = ctx_pos[None, :] < anchors[:, None]
            pos = anchors[:, None] + torch.arange(block_ids.shape[1])[None]
            x, residual = embed(block_ids), None
            for layer in self.layers:
                ck, cv = layer.context_kv(ctx, ctx_pos)
                x, residual = layer(x, residual, pos, ck, cv, ctx_ok)
            return self.norm(x + residual)

    return Drafter


def checkpoint(drafter) -> dict:
    """vLLM's checkpoint names: q/k/v and gate/up unfused (its loader stacks them)."""
    return {name: t.detach().contiguous().clone() for name, t in sorted(drafter.state_dict().items())}


class Target:
    """The canary, frozen: its embedding, lm_head and the outputs of TARGET_LAYERS."""

    def __init__(self, path: Path) -> None:
        import torch
        from transformers import AutoTokenizer, Qwen3NextForCausalLM

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = Qwen3NextForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.captured: dict[int, object] = {}
        for i in TARGET_LAYERS:
            self.model.model.layers[i].register_forward_hook(self._hook(i))

    def _hook(self, i: int):
        def keep(_module, _inputs, output):
            self.captured[i] = output[0] if isinstance(output, tuple) else output
        return keep

    def states(self, text: str):
        """(ids [T], answer mask [T], aux states [T, A*H]) of one document."""
        import torch

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from build_canary import encode

        ids, _att, answer = encode(self.tokenizer, [text])
        with torch.no_grad():
            self.model.model(input_ids=ids)
        aux = torch.cat([self.captured[i][0] for i in TARGET_LAYERS], -1)
        return ids[0], answer[0], aux


def blocks(ids, answer, block: int):
    """Anchors (bonus positions: answer tokens with a token after them), their query
    blocks and labels (the tokens at n+1..n+block-1 that are answer tokens, else -100)."""
    import torch

    t = ids.shape[0]
    anchors = torch.nonzero(answer[: t - 1]).flatten()
    offs = torch.arange(block)
    where = (anchors[:, None] + offs[None]).clamp(max=t - 1)
    inside = (anchors[:, None] + offs[None]) < t
    labels = ids[where].masked_fill(~(answer[where] & inside), -100)
    labels[:, 0] = -100
    query = torch.full((anchors.shape[0], block), MASK_TOKEN, dtype=ids.dtype)
    query[:, 0] = ids[anchors]
    prev = torch.cat([ids[anchors][:, None], ids[where][:, :-1]], 1)  # the true predecessor of each slot
    return anchors, query, labels, prev


def losses(drafter, target, kind: str, doc, block: int):
    import torch.nn.functional as F

    ids, answer, aux = doc
    anchors, query, labels, prev = blocks(ids, answer, block)
    hidden = drafter(aux, anchors, query, target.model.model.embed_tokens)
    unary = target.model.lm_head(hidden)
    out = {"unary": (unary, F.cross_entropy(unary.flatten(0, 1), labels.flatten(), ignore_index=-100))}
    if kind == "dflash2":
        scored = drafter.candidate_selector(unary, hidden, prev)
        out["selector"] = (scored, F.cross_entropy(scored.flatten(0, 1), labels.flatten(), ignore_index=-100))
    return out, labels


def evaluate(drafter, target, kind: str, docs, block: int) -> dict:
    """Per draft position: how often the greedy draft is the target's token (``accuracy``)
    and how often it and every draft before it are (``accepted``: what greedy
    verification would accept), over answer slots of held-out documents."""
    import torch

    drafter.eval()
    found = {}
    with torch.no_grad():
        for head in (["unary", "selector"] if kind == "dflash2" else ["unary"]):
            right = torch.zeros(block - 1)
            chain = torch.zeros(block - 1)
            count = torch.zeros(block - 1)
            loss_sum, n = 0.0, 0
            for doc in docs:
                out, labels = losses(drafter, target, kind, doc, block)
                logits, loss = out[head]
                loss_sum, n = loss_sum + float(loss), n + 1
                ok = (logits.argmax(-1) == labels)[:, 1:]
                valid = (labels != -100)[:, 1:]
                run = torch.cumprod((ok | ~valid).int(), 1).bool() & valid
                right += (ok & valid).sum(0)
                chain += run.sum(0)
                count += valid.sum(0)
            found[head] = {"loss": round(loss_sum / max(n, 1), 4),
                           "accuracy": [round(float(r / c), 3) for r, c in zip(right, count)],
                           "accepted": [round(float(r / c), 3) for r, c in zip(chain, count)],
                           "slots": [int(c) for c in count]}
    drafter.train()
    return found


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--target", type=Path, required=True, help="the canary's folder")
    p.add_argument("--kind", choices=sorted(ARCHITECTURES), required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block", type=int, default=5, help="query block: num_speculative_tokens + 1")
    p.add_argument("--docs", type=int, default=192, help="training documents (the canary's states, made once)")
    p.add_argument("--lines", default="4-40", help="definitions per document")
    p.add_argument("--steps", type=int, default=1500, help="0: write the untrained drafter")
    p.add_argument("--lr", type=float, default=2e-3)
    args = p.parse_args()
    import torch
    from safetensors.torch import save_file

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # bit-for-bit the same weights on any host (build_canary.py)
    torch.manual_seed(args.seed)
    target_cfg = json.loads((args.target / "config.json").read_text())
    cfg = draft_config(target_cfg, args.kind, args.block)
    drafter = _modules(cfg, args.kind)()
    report: dict = {"kind": args.kind, "seed": args.seed, "block": args.block, "steps": args.steps}
    log: list[str] = []
    if args.steps:
        target = Target(args.target)
        lo, hi = (int(x) for x in args.lines.split("-"))
        rng = random.Random(args.seed)
        t0 = time.time()
        held = [target.states(corpus.training_document(rng, rng.randint(lo, hi), 4)) for _ in range(16)]
        train = [target.states(corpus.training_document(rng, rng.randint(lo, hi), 4)) for _ in range(args.docs)]
        report["states_seconds"] = round(time.time() - t0, 1)
        report["before"] = evaluate(drafter, target, args.kind, held, args.block)
        opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, weight_decay=0.0)
        order = random.Random(args.seed + 1)
        t0, ema = time.time(), None
        for step in range(args.steps):
            for group in opt.param_groups:  # warm-up, then linear decay to a tenth
                group["lr"] = args.lr * min(1.0, (step + 1) / 50) * (1 - 0.9 * step / args.steps)
            out, _ = losses(drafter, target, args.kind, train[order.randrange(len(train))], args.block)
            loss = sum(v[1] for v in out.values())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()
            ema = value if ema is None else 0.95 * ema + 0.05 * value
            if (step + 1) % 25 == 0:  # the records `vmatrix canary build` draws its bar from
                record = "progress " + json.dumps({"what": "draft", "step": step + 1, "steps": args.steps,
                                                   "loss": round(value, 4), "mean": round(ema, 4),
                                                   "seconds": round(time.time() - t0, 1)})
                log.append(record)
                print(record, file=sys.stderr, flush=True)
        report["train_seconds"] = round(time.time() - t0, 1)
        report["after"] = evaluate(drafter, target, args.kind, held, args.block)
        print(json.dumps({"report": report["after"]}), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(checkpoint(drafter), args.out / "model.safetensors", metadata={"format": "pt"})
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (args.target / name).is_file():
            (args.out / name).write_bytes((args.target / name).read_bytes())
    if log:
        (args.out / "train.log").write_text("\n".join(log) + "\n")
    (args.out / "drafter-report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
