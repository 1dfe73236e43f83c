"""build_nemotronh.py with ``--groups G``: Mamba2 ``n_groups`` G, so the heads read and write
the state through G key projections (B and C) instead of one. Issue 41, the tenth pass.

Why: the Nemotron-H canary looks a name up in the Mamba2 state (recall_probe.py), and that
state is a linear associative memory whose keys are B: with one group every head shares one
128-wide key space. It holds a document's lines about alike (state_reach.py: each asked line
has ~1/N of the state's write weight, none forgotten by the decay, at 1.5k and 10k), so
recall falls with the number of lines held (~120 at 1.5k, ~800 at 10k), not with distance:
the third and ninth passes' probes. G groups give G key spaces for the same heads (the
released Nemotron-H models have 8). vLLM builds B and C per group, as transformers does.

``--init-from`` a one-group build starts from its weights: each group's B and C projections
(in_proj rows and conv channels) are that build's one, so every head reads and writes what it
did; only the mixer's gated norm, which normalises each group's heads apart, differs. A
separate file so build_nemotronh.py's bytes, the earlier builds' recipe identity, stay as
they are. Usage: build_nemotronh.py's, plus ``--groups G`` (default 1, which is that builder).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_nemotronh as base


def groups_from(argv: list[str]) -> tuple[int, list[str]]:
    """``--groups G`` taken out of the argument vector; the rest is build_nemotronh's."""
    def positive(value: str) -> int:
        if not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of Mamba2 groups, 1 or more")
        return int(value)

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--groups", type=positive, default=1)
    known, rest = parser.parse_known_args(argv)
    return known.groups, rest


def widened(weights: dict, groups: int, heads: int, state: int, intermediate: int) -> dict:
    """A one-group build's weights (the model's names) for ``groups`` groups: B and C rows of
    each mixer's in_proj and channels of its conv1d repeated once a group."""
    import torch

    if heads % groups:
        raise SystemExit(f"--groups {groups}: must divide --mamba-heads {heads}")

    def wide(t):  # x, B, C along dim 0 -> x, B once a group, C once a group
        x, B, C = t.split([intermediate, state, state])
        times = (groups, *[1] * (t.dim() - 1))
        return torch.cat([x, B.repeat(times), C.repeat(times)])

    out = dict(weights)
    for name, t in weights.items():
        if name.endswith("mixer.in_proj.weight"):  # rows: gate, then x B C (the conv's input), then dt
            gate, xbc, dt = t.split([intermediate, intermediate + 2 * state, heads])
            out[name] = torch.cat([gate, wide(xbc), dt])
        elif name.endswith(("mixer.conv1d.weight", "mixer.conv1d.bias")):
            out[name] = wide(t)
    return out


GROUPS = 1  # --groups, set by main before build_nemotronh reads its arguments
plain_config, plain_init_from = base.config, base.init_from


def config(args, tokenizer, vocab_size: int):
    cfg = plain_config(args, tokenizer, vocab_size)
    cfg.n_groups = GROUPS
    return cfg


def init_from(model, folder: Path, out: Path) -> None:
    """build_nemotronh's ``--init-from``, widening a one-group build to the model's groups."""
    import json

    from safetensors.torch import load_file, save_file

    groups, source = model.config.n_groups, json.loads((folder / "config.json").read_text()).get("n_groups", 1)
    if source == groups:
        return plain_init_from(model, folder, out)
    if source != 1:
        raise SystemExit(f"--init-from {folder}: n_groups {source}; only 1 or {groups} start this build")
    cfg = model.config
    weights = widened(load_file(str(folder / "model.safetensors")), groups, cfg.mamba_num_heads,
                      cfg.ssm_state_size, cfg.mamba_num_heads * cfg.mamba_head_dim)
    staged = out / "init-from"
    staged.mkdir(exist_ok=True)
    try:
        save_file(weights, staged / "model.safetensors", metadata={"format": "pt"})
        (staged / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
        plain_init_from(model, staged, out)
    finally:
        for f in staged.iterdir():
            f.unlink()
        staged.rmdir()


def main() -> None:
    global GROUPS
    GROUPS, sys.argv[1:] = groups_from(sys.argv[1:])
    base.config, base.init_from = config, init_from
    base.main()


if __name__ == "__main__":
    main()
