"""Write the tiny Nemotron-H hybrid canary (Mamba2 + attention + an MTP head vLLM loads) and
train it to recall, reproducibly: the second hybrid family beside tiny-qwen3next (issue 41).

Runs *inside an engine venv* or on a GPU host, like build_canary.py, whose tokenizer,
documents, curriculum (``--stage``, ``until``), training loop, SIGTERM/``--resume`` and
report it imports as they are: build_canary.py's bytes are the tiny-qwen3next recipe's
identity (orchestrator/plan/canary.py), so they stay unchanged and this file holds only what
differs for Mamba2. Usage, as build_canary.py:

    python build_nemotronh.py OUT --seed 0 [--stage "lines=2-12 batch=64 steps=3000 ..."]...

Why the choices below (the Mamba2 equivalents of build_canary.py's):
- ``hybrid_override_pattern`` ``M-M-M-*-``: three Mamba2 mixers, then the only attention
  layer, each followed by a relu2 MLP (Nemotron-H's layer is one mixer *or* one MLP). The
  attention is the last mixer, so the keys it finds a name by were written through the
  Mamba2 layers' recurrent state; Nemotron-H's attention has no positional encoding, so it
  tells positions apart only by what the recurrent layers wrote into them;
- ``A_log`` ~ log U(0.005, 0.05) and ``dt_bias`` = 0, frozen in training: Mamba2's
  per-token decay is exp(-exp(A_log) * softplus(dt + dt_bias)), GDN's formula, so at
  dt = 0 it is 0.966..0.997, the GDN canary's range, and training cannot shorten the
  memory (a state that forgets cannot be corrupted visibly). transformers' own Mamba2 init
  (A = 1..H, softplus(dt_bias) log-uniform in [time_step_min, 0.1]) is 0.67..0.999 a
  token at H = 4, a mix of short and long heads that training would be free to move;
- ``conv_kernel`` 4: the causal conv sees 4 tokens, a name is 5, so no conv window holds
  a whole name and recall goes through the SSM state;
- Mamba2 head dim 64 and state size 128, one group: the dims of the released Nemotron-H
  models, which vLLM's CPU chunked scan and ``selective_state_update`` are written for;
  4 heads: the state is 4 x 64 x 128 floats a layer, the GDN canary's 2 x 128 x 128;
- ``chunk_size`` 128 (``mamba_chunk_size``): vLLM's chunked scan and its prefix-cache
  alignment work in these chunks; transformers' PyTorch scan (what trains here: no
  mamba-ssm on the hosts) holds chunk^2 per head and chunk, small at 128;
- ``time_step_min`` 1e-9: transformers clamps dt at it in training, vLLM at 0
  (``dt_limit=(0.0, inf)``); at the default 0.001 a token the model learns to write
  weakly (dt + dt_bias < -6.9) would be trained with another dt than it is served with.
  Not 0: transformers' init takes its log;
- the MTP head is ``mtp_hybrid_override_pattern`` ``*``: vLLM's ``NemotronHMultiTokenPredictor``
  builds attention (``*``) and MoE (``E``) steps only, and one attention step with its
  start projections (``enorm``, ``hnorm``, ``eh_proj``) and end norm (``final_layernorm``)
  is the least it loads; trained with the target frozen, as build_canary.py's.
The checkpoint is written under the released models' names (``backbone.*``, ``lm_head``,
``mtp.layers.0.*``), the names vLLM's ``NemotronHForCausalLM`` and ``NemotronHMTP``
loaders map from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_canary as shared  # the tokenizer, curriculum, loop and report of tiny-qwen3next

PATTERN = "M-M-M-*-"
MTP_PATTERN = "*"


def config(args, tokenizer, vocab_size: int):
    from transformers import NemotronHConfig

    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    if set(args.pattern) - set(kinds) or "*" not in args.pattern or "M" not in args.pattern:
        raise SystemExit(f"--pattern {args.pattern!r}: Mamba2 (M), attention (*) and MLP (-) layers only, "
                         "at least one M and one *")
    return NemotronHConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        layers_block_type=[kinds[c] for c in args.pattern],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=args.hidden * 2,
        mlp_hidden_act="relu2",
        ssm_state_size=args.state,
        mamba_num_heads=args.mamba_heads,
        mamba_head_dim=64,
        n_groups=1,
        conv_kernel=4,
        chunk_size=args.chunk,
        time_step_min=1e-9,
        use_conv_bias=True,
        use_bias=False,
        num_nextn_predict_layers=1,
        mtp_layers_block_type=[kinds[c] for c in MTP_PATTERN],
        max_position_embeddings=args.max_len,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )


def chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None,
               dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, **_):
    """transformers' PyTorch Mamba2 chunked scan (``mamba2_chunk_scan``, the SSD "minimal"
    form), the same sums contracted with einsum. transformers multiplies each product out
    before it sums (``(C[..., None, :, :] * B[..., None, :, :, :]).sum(-1)``): at chunk 128,
    state 128 and batch 64 that is an 8 GiB tensor a layer kept for the backward, which
    held each H200 builder at 25.5 GB, killed two of six with CUDA OOM and ran stage 1 at
    1.1 s a step (2026-12-03). The result is the same function (tests/test_nemotronh.py
    compares values and gradients with transformers' own); only the order of the float sums
    differs."""
    import torch
    import torch.nn.functional as F
    from transformers.models.nemotron_h.modeling_nemotron_h import reshape_into_chunks, segment_sum

    batch, length, heads, head_dim = hidden_states.shape
    groups = B.shape[2]
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1]).float()
    x = hidden_states.float()
    B = B.float().repeat_interleave(heads // groups, dim=2, output_size=heads)
    C = C.float().repeat_interleave(heads // groups, dim=2, output_size=heads)
    pad = (chunk_size - length % chunk_size) % chunk_size
    residual = D[..., None] * F.pad(x, (0, 0, 0, 0, 0, pad)) if D is not None else None
    x = x * dt[..., None]
    A = A.to(x.dtype) * dt
    x, A, B, C = (reshape_into_chunks(t, pad, chunk_size) for t in (x, A, B, C))
    A = A.permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segment_sum(A))  # b h c l s
    # 1. within each chunk
    scores = torch.einsum("bclhn,bcshn->bclsh", C, B) * L.permute(0, 2, 3, 4, 1)
    y_diag = torch.einsum("bclsh,bcshp->bclhp", scores, x)
    # 2. each chunk's own end state
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)  # b h c l
    states = torch.einsum("bclhn,bclhp->bchpn", B * decay_states.permute(0, 2, 3, 1)[..., None], x)
    # 3. states carried across chunks
    previous = (initial_states[:, None].to(dtype=states.dtype, device=states.device)
                if initial_states is not None else torch.zeros_like(states[:, :1]))
    states = torch.cat([previous, states], dim=1)
    decay_chunk = torch.exp(segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))  # b h z c
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    # 4. the carried state read out in each chunk
    y_off = torch.einsum("bclhn,bchpn->bclhp", C, states) * torch.exp(A_cumsum).permute(0, 2, 3, 1)[..., None]
    out = (y_diag + y_off).reshape(batch, -1, heads, head_dim)
    if residual is not None:
        out = out + residual
    if pad > 0:
        out = out[:, :length]
    return (out, final_state) if return_final_states else out


BLOCK_ATTENTION = "vmatrix_blocks"
QUERY_BLOCK = 1024


def block_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **_):
    """transformers' sdpa attention (``sdpa_attention_forward``: softmax over the keys the mask
    allows, causal without one), ``QUERY_BLOCK`` queries at a time, each block recomputed in
    the backward: its memory is a block's scores, not the square. The sixth pass's h16-s1 died
    at its first 600-1,700-line step asking for 14.00 GiB (sixth-pass-logs.tgz), batch 2 x 4
    heads x ~21.7k^2 float32 scores (docs/BENCHMARKS.md). The same function
    (tests/test_nemotronh.py compares values and gradients with sdpa's)."""
    import torch
    from torch.utils.checkpoint import checkpoint
    from transformers.integrations.sdpa_attention import repeat_kv

    if dropout:
        raise ValueError("block_attention: no dropout (the canary trains without)")
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    q_len, k_len = query.shape[2], key.shape[2]
    floor = torch.finfo(query.dtype).min

    def one(q, key, value, start):
        scores = torch.matmul(q, key.transpose(-1, -2)) * scale
        if attention_mask is None:  # causal, the queries the last q_len positions (sdpa's is_causal)
            rows = torch.arange(start, start + q.shape[2], device=q.device)[:, None] + (k_len - q_len)
            scores = scores.masked_fill(torch.arange(k_len, device=q.device)[None, :] > rows, floor)
        else:
            mask = attention_mask[:, :, start:start + q.shape[2]]
            scores = scores.masked_fill(~mask, floor) if mask.dtype == torch.bool else scores + mask
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype), value)

    out = [checkpoint(one, query[:, :, i:i + QUERY_BLOCK], key, value, i, use_reentrant=False)
           if torch.is_grad_enabled() else one(query[:, :, i:i + QUERY_BLOCK], key, value, i)
           for i in range(0, q_len, QUERY_BLOCK)]
    return torch.cat(out, dim=2).transpose(1, 2).contiguous(), None


def use_block_attention(model) -> None:
    """Train and report ``model`` with :func:`block_attention` and sdpa's masks (``save``
    keeps the name out of the config vLLM reads)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(BLOCK_ATTENTION, block_attention)
    AttentionMaskInterface.register(BLOCK_ATTENTION, sdpa_mask)
    model.set_attn_implementation(BLOCK_ATTENTION)


def use_einsum_scan() -> None:
    """Make transformers' Nemotron-H mixer train with ``chunk_scan`` (its forward calls the
    module's ``mamba2_chunk_scan`` by name)."""
    from transformers.models.nemotron_h import modeling_nemotron_h as mod

    if not hasattr(mod, "mamba2_chunk_scan"):
        raise SystemExit("transformers' Nemotron-H has no mamba2_chunk_scan to replace: this builder was "
                         "written against transformers 5.17-5.19")
    mod.mamba2_chunk_scan = chunk_scan


def mamba_mixers(model):
    return [layer.mixer for layer in model.model.layers if layer.block_type == "linear_attention"]


def new_model(args, tokenizer, vocab_size: int):
    """The untrained canary and its config, drawn from torch's current seed, with the long
    Mamba2 decay, (``--decay mamba2``, issue 41's third pass) Mamba2's own init, or (``--decay
    short``, the fourth pass) a memory of a few tokens."""
    import torch
    from transformers import NemotronHForCausalLM

    use_einsum_scan()
    cfg = config(args, tokenizer, vocab_size)
    model = NemotronHForCausalLM(cfg).to(torch.float32)
    use_block_attention(model)
    with torch.no_grad():
        for mixer in mamba_mixers(model):
            if args.decay == "long":
                mixer.A_log.copy_(torch.empty_like(mixer.A_log).uniform_(0.005, 0.05).log())
                mixer.dt_bias.zero_()
            elif args.decay == "short":
                # 0.66..0.90 a token at dt = 0: the state starts out holding the last name and
                # its " =", not a table of lines (the third pass found the long decay's state
                # turned into one that holds ~20 names), in the hope that the attention layer
                # finds the line, by keys the state wrote. Only a start: dt is trained, and a
                # small dt keeps a state as long (the fourth pass, images/canary/README.md).
                mixer.A_log.copy_(torch.empty_like(mixer.A_log).uniform_(0.15, 0.6).log())
                mixer.dt_bias.zero_()
            else:  # "mamba2": the Mamba2 paper's init, short and long heads in one layer
                mixer.A_log.copy_(torch.empty_like(mixer.A_log).uniform_(1.0, 16.0).log())
                dt = torch.empty_like(mixer.dt_bias).uniform_(math.log(1e-3), math.log(1e-1)).exp()
                mixer.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
    # build_canary's MTP training and report read the embedding as ``model.model.embed_tokens``
    # (Qwen3-Next's name); Nemotron-H calls it ``embeddings``. The same module under the
    # other name, set past nn.Module's bookkeeping so it is no second state_dict entry.
    object.__setattr__(model.model, "embed_tokens", model.model.embeddings)
    return model, cfg


def _mtp_module():
    import torch
    from transformers import NemotronHForCausalLM
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNorm

    class MTPHead(torch.nn.Module):
        """vLLM's Nemotron-H MTP head for ``mtp_hybrid_override_pattern`` ``*``, in transformers'
        modules, so that what is trained here is what vLLM drafts with
        (``NemotronHMTPAttentionDecoderLayer.forward``, one step): the embedding of token t+1
        and the target's final, normed hidden state at t, each RMS-normed (``enorm``,
        ``hnorm``), concatenated and projected (``eh_proj``); then Nemotron-H's attention
        block (``norm``, ``mixer``) and its residual, ``final_layernorm``, and the target's
        ``lm_head``. Its state_dict names are the checkpoint's ``mtp.*`` names."""

        def __init__(self, cfg, seed: int) -> None:
            super().__init__()
            torch.manual_seed(seed + 1)
            h, eps = cfg.hidden_size, cfg.layer_norm_epsilon
            layer_cfg = type(cfg)(**{**cfg.to_dict(), "layers_block_type": ["full_attention"],
                                     "num_nextn_predict_layers": 0})
            # Eager attention with build_canary's explicit causal mask: the same in every
            # transformers release. The block comes from a one-layer model so transformers
            # initialises it.
            layer_cfg._attn_implementation = "eager"
            donor = NemotronHForCausalLM(layer_cfg).to(torch.float32).model.layers[0]
            step = torch.nn.Module()
            step.enorm = NemotronHRMSNorm(h, eps=eps)
            step.hnorm = NemotronHRMSNorm(h, eps=eps)
            step.eh_proj = torch.nn.Linear(2 * h, h, bias=False)
            step.norm = donor.norm
            step.mixer = donor.mixer
            step.final_layernorm = NemotronHRMSNorm(h, eps=eps)
            with torch.no_grad():
                step.eh_proj.weight.normal_(0.0, 0.02)
            self.layers = torch.nn.ModuleList([step])

        def forward(self, model, embeds, hidden, position_ids, mask):
            step = self.layers[0]
            x = step.eh_proj(torch.cat([step.enorm(embeds), step.hnorm(hidden)], dim=-1))
            out, _ = step.mixer(hidden_states=step.norm(x), attention_mask=mask)
            return step.final_layernorm(x + out)

    return MTPHead


def train(model, tokenizer, seed: int, stages, device, done, train_decay: bool = False) -> bool:
    """build_canary.train's next-token training on answer tokens, the Mamba2 decay frozen
    (A_log, dt_bias) for the reason it freezes GDN's, unless ``train_decay`` (an experiment)."""
    import torch

    for mixer in mamba_mixers(model):
        mixer.A_log.requires_grad_(train_decay)
        mixer.dt_bias.requires_grad_(train_decay)

    def loss_of(ids, att, answer):
        return model(input_ids=ids, attention_mask=att, labels=ids.masked_fill(~answer, -100)).loss

    torch.manual_seed(seed + sum(done.train))
    return shared._fit(model, [p for p in model.parameters() if p.requires_grad], loss_of, tokenizer, seed + 7,
                       stages, device, "train", done)


def save(out: Path, model, mtp, cfg, args) -> None:
    """Write the checkpoint vLLM loads: ``backbone.*`` and ``lm_head.weight`` (the released
    models' names; vLLM maps backbone -> model, embeddings -> embed_tokens, A_log -> A) plus
    ``mtp.*``, and a config.json that states the patterns as strings as well as lists
    (vLLM reads ``hybrid_override_pattern``; transformers 5 writes ``layers_block_type``)."""
    from safetensors.torch import save_file

    weights = {}
    for name, t in model.state_dict().items():
        weights["backbone." + name[len("model."):] if name.startswith("model.") else name] = t
    for name, t in mtp.state_dict().items():
        weights["mtp." + name] = t
    weights = {k: v.detach().contiguous() for k, v in sorted(weights.items())}
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})

    config = cfg.to_dict()
    for key in ("transformers_version", "_attn_implementation", "dtype", "torch_dtype"):
        config.pop(key, None)
    config |= {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
               "num_hidden_layers": len(args.pattern), "hybrid_override_pattern": args.pattern,
               "mtp_hybrid_override_pattern": MTP_PATTERN, "num_nextn_predict_layers": 1,
               "torch_dtype": "float32"}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": config["eos_token_id"], "pad_token_id": config["pad_token_id"]}, indent=2))


def grow(done, stages, mtp_stages) -> bool:
    """Fit a resumed build's progress to a recipe that grew target stages after the ones it
    ran (a second pass of the curriculum): the new stages are trained from their start, and
    the MTP head afresh (its seed's initial weights, the caller keeps them) on the target
    they leave, as a run of the grown recipe from scratch would. True if it grew."""
    grown = len(stages) - len(done.train)
    if grown < 0 or (grown and len(mtp_stages) != len(done.mtp)):
        raise SystemExit(f"--resume: the build ran {len(done.train)} stages and {len(done.mtp)} MTP stages; "
                         f"the recipe has {len(stages)} and {len(mtp_stages)} (only target stages may be added)")
    if not grown:
        return False
    done.train += [0] * grown
    done.ended["train"] += [False] * grown
    done.mtp = [0] * len(mtp_stages)
    done.ended["mtp"] = [False] * len(mtp_stages)
    done.loss["mtp"] = None
    return True


def init_from(model, folder: Path, out: Path) -> None:
    """Start the target from a finished build's weights (``model.safetensors``, vLLM's names)
    with its tokenizer (same seed and vocab); the MTP head starts afresh."""
    from safetensors.torch import load_file

    if (folder / "tokenizer.json").read_bytes() != (out / "tokenizer.json").read_bytes():
        raise SystemExit(f"--init-from {folder}: its tokenizer is not this build's (another --seed or --vocab)")
    weights = load_file(str(folder / "model.safetensors"))
    target = {("model." + k[len("backbone."):] if k.startswith("backbone.") else k): v
              for k, v in weights.items() if not k.startswith("mtp.")}
    missing, unexpected = model.load_state_dict(target, strict=False)
    if missing or unexpected:
        raise SystemExit(f"--init-from {folder}: not this architecture (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")


def save_resume(out: Path, model, mtp, done) -> None:
    """The build's state as ``--resume`` reads it, written beside and renamed: a builder
    killed while saving leaves the previous one whole."""
    import torch

    part = out / (shared.RESUME + ".part")
    torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "progress": asdict(done)}, part)
    part.replace(out / shared.RESUME)


@contextlib.contextmanager
def checkpoints(save):
    """Save at every stage's end as well as at a stop, so a builder that dies loses one stage
    at most: the sixth pass's h16-s1 (2026-12-05) trained two stages for ~930 s on a GPU it
    shared with engines, ran out of memory at the third's first step and died with nothing
    saved. build_canary.py's bytes are tiny-qwen3next's recipe identity (its shipped
    checkpoint), so its stage-end record (`progress(..., ended=...)`) is hooked here, not
    changed there."""
    plain = shared.progress

    def progress(what, step, steps, **extra):
        plain(what, step, steps, **extra)
        if "ended" in extra:
            save()

    shared.progress = progress
    try:
        yield
    finally:
        shared.progress = plain


def build(out: Path, args) -> bool:
    """build_canary.build for this model: False if stopped part-way (resume.pt holds it)."""
    import torch

    tokenizer = shared.build_tokenizer(out, args.seed, args.vocab)
    vocab_size = -(-len(tokenizer) // 64) * 64
    torch.manual_seed(args.seed)
    model, cfg = new_model(args, tokenizer, vocab_size)
    mtp = _mtp_module()(cfg, args.seed)
    stages = [shared.Stage.parse(s) for s in args.stage]
    mtp_stages = [shared.Stage.parse(s) for s in args.mtp_stage]
    done = shared.Progress.new(stages, mtp_stages)
    if args.init_from:
        init_from(model, args.init_from, out)
    if args.resume:
        saved = torch.load(out / shared.RESUME, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        done = shared.Progress(**saved["progress"])
        if not grow(done, stages, mtp_stages):
            mtp.load_state_dict(saved["mtp"])
    device = torch.device(args.device)
    model.to(device)
    mtp.to(device)
    with checkpoints(lambda: save_resume(out, model, mtp, done)):
        try:
            finished = (train(model, tokenizer, args.seed, stages, device, done, args.train_decay)
                        and shared.train_mtp(model, mtp, tokenizer, args.seed, mtp_stages, device, done))
        except torch.OutOfMemoryError as e:
            # Raised in a step's forward or backward, before its optimizer step: the weights
            # and `done` are the last whole step's, so this stops as SIGTERM would.
            print(f"out of memory, stopped after step {sum(done.train) + sum(done.mtp)}: "
                  f"{str(e).splitlines()[0]}", file=sys.stderr, flush=True)
            finished = False
    if not finished:
        save_resume(out, model, mtp, done)
        print(json.dumps({"stopped": asdict(done)}), file=sys.stderr, flush=True)
        return False
    if stages or mtp_stages:
        found = shared.report(model, mtp, tokenizer, args.seed, device,
                              [int(n) for n in args.report_lengths.split(",")])
        found["steps"] = {"train": done.train, "mtp": done.mtp}
        found["train_seconds"] = round(done.seconds, 1)
        found["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        (out / "canary-report.json").write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    model.to("cpu")
    mtp.to("cpu")
    save(out, model, mtp, cfg, args)
    (out / shared.RESUME).unlink(missing_ok=True)
    return True


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--pattern", default=PATTERN, help="hybrid_override_pattern: M Mamba2, * attention, - MLP")
    p.add_argument("--mamba-heads", type=int, default=4)
    p.add_argument("--state", type=int, default=128, help="Mamba2 ssm_state_size")
    p.add_argument("--chunk", type=int, default=128, help="Mamba2 chunk_size (mamba_chunk_size)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=131072)
    p.add_argument("--stage", action="append", default=[], help="a training stage (repeat, in order): "
                   "'lines=MIN-MAX batch=N steps=N lr=X [turns=N] [until=LOSS]'")
    p.add_argument("--mtp-stage", action="append", default=[], help="an MTP head stage, the same form")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--report-lengths", default="1500,10000,20000", help="prefix tokens to report recall at")
    p.add_argument("--resume", action="store_true", help=f"continue the build stopped in OUT ({shared.RESUME})")
    p.add_argument("--decay", choices=("long", "mamba2", "short"), default="long",
                   help="Mamba2 decay init: long memory (the recipe's), Mamba2's own, or a few tokens")
    p.add_argument("--train-decay", action="store_true", help="train A_log and dt_bias (frozen by default)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="a finished build's folder to start the target from (its stages run from their start)")
    args = p.parse_args()
    # As build_canary.main: cuBLAS deterministic, tokenizers quiet in forked workers,
    # deterministic algorithms where CUDA has them, one CPU thread.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cpu":
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    shared.Stop.install()
    if not build(args.out, args):
        sys.exit(3)  # stopped: resume with --resume
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
