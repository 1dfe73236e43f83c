"""The CUDA positive control for restored states in any mamba layer
(images/patches/zero-restored-state-cuda): its one patch applies to the
``vllm/v1/worker/mamba_utils.py`` of vLLM 0.25.1 and 0.26.0 (pristine copies, gzipped, in
tests/data/vllm-cuda/) without fuzz, and the patched ``preprocess_mamba`` zeroes exactly
the recurrent states a prefix-cache hit restores, after the copy that restores them, in a
Mamba2 layer as in a GDN one. Fast: no engine, no GPU, no vLLM import (the function is run
on stand-ins for the runner's state). Not run on a GPU yet (its README)."""

from __future__ import annotations

import ast
import gzip
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vmatrix.images.recipe import patch_files

DATA = Path(__file__).resolve().parent / "data" / "vllm-cuda"
FILE = "vllm/v1/worker/mamba_utils.py"
RELEASES = ("0.25.1", "0.26.0")
SET = "zero-restored-state-cuda"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _site(tmp: Path, release: str, patched: bool) -> Path:
    site = tmp / release / ("patched" if patched else "pristine")
    dest = site / FILE
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.decompress((DATA / release / f"{FILE}.gz").read_bytes()))
    for f in patch_files(SET) if patched else ():  # what orchestrator/runtimes/venvs.py runs
        done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)],
                              check=True, capture_output=True, text=True)
        assert "fuzz" not in done.stdout, done.stdout
    return site


class _Pool:
    """A state pool: ``pool[block].zero_()`` records ("zero", layer, kind, block) in CALLS."""

    def __init__(self, layer: str, kind: str, calls: list) -> None:
        self.layer, self.kind, self.calls = layer, kind, calls

    def __getitem__(self, block: int) -> SimpleNamespace:
        return SimpleNamespace(zero_=lambda: self.calls.append(("zero", self.layer, self.kind, block)))


def _run(site: Path, spec_blocks: int = 0) -> list:
    """preprocess_mamba of SITE over three requests (block 4), a GDN and a Mamba2 layer in one
    mamba group: a prefix-cache hit (8 tokens computed, blocks 0-1 cached), a fresh request
    and the next chunk of a chunked prefill. Returns the copies and zeroings, in order."""
    tree = ast.parse((site / FILE).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "preprocess_mamba")
    for a in fn.args.args:
        a.annotation = None
    fn.returns = None
    calls: list = []
    ns = {
        "cdiv": lambda a, b: -(-a // b),
        "cleanup_mamba_state_idx": lambda *_: None,
        "collect_mamba_copy_meta": lambda bufs, kv, funcs, gids, src, dst, *_: calls.append(("copy", src, dst)),
        "do_mamba_copy_block": lambda bufs: calls.append(("memcpy",)),
    }
    # The function under test, compiled from the patched file (vendored vLLM source).
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(site / FILE), "exec"), ns)  # noqa: S102
    layers = {name: SimpleNamespace(kv_cache=[_Pool(name, "conv", calls), _Pool(name, "temporal", calls)])
              for name in ("gdn.0", "mixer.1")}
    requests = {
        "hit": SimpleNamespace(num_computed_tokens=8, block_ids=[[10, 11, 12, 13, 14]]),
        "fresh": SimpleNamespace(num_computed_tokens=0, block_ids=[[20, 21, 22]]),
        "chunk": SimpleNamespace(num_computed_tokens=4, block_ids=[[30, 31, 32, 33]]),
    }
    ns["preprocess_mamba"](
        SimpleNamespace(num_scheduled_tokens={"hit": 3, "fresh": 5, "chunk": 6}),
        SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=["gdn.0", "mixer.1"])]),
        SimpleNamespace(enable_prefix_caching=True),
        {"chunk": 0},
        SimpleNamespace(req_ids=["hit", "fresh", "chunk"], num_accepted_tokens_cpu=[1, 1, 1]),
        requests,
        layers,
        (),
        SimpleNamespace(mamba_group_ids=[0], offset=0,
                        mamba_spec=SimpleNamespace(num_speculative_blocks=spec_blocks, block_size=4)),
    )
    return calls


@pytest.mark.parametrize("release", RELEASES)
def test_the_patch_applies_to_both_releases_unfuzzed(tmp_path: Path, release: str) -> None:
    site = _site(tmp_path, release, patched=True)
    text = (site / FILE).read_text()
    compile(text, FILE, "exec")
    assert "zero-restored-state-cuda: zeroed the recurrent state" in text


@pytest.mark.parametrize("release", RELEASES)
def test_only_the_state_a_hit_restores_is_zeroed_after_its_copy_in_every_mamba_layer(
        tmp_path: Path, release: str) -> None:
    calls = _run(_site(tmp_path, release, patched=True))
    # hit: the state of its last cached block, (8-1)//4 = 1, restored into block cdiv(11, 4)-1
    # = 2 (id 12), then its temporal state zeroed there in both layers, conv states left alone.
    # chunk: its own block 0 copied into block 2 (id 32), as every step does: not a restore.
    assert calls == [("copy", 1, 2), ("copy", 0, 2), ("memcpy",),
                     ("zero", "gdn.0", "temporal", 12), ("zero", "mixer.1", "temporal", 12)]


@pytest.mark.parametrize("release", RELEASES)
def test_with_speculative_blocks_the_restore_is_zeroed_where_it_landed(tmp_path: Path, release: str) -> None:
    calls = _run(_site(tmp_path, release, patched=True), spec_blocks=1)
    # One speculative block: the running state sits one block short of the last, the same
    # block 2 (cdiv(11, 4) + 1 - 1 - 1) for the hit.
    assert calls[-2:] == [("zero", "gdn.0", "temporal", 12), ("zero", "mixer.1", "temporal", 12)]
    assert ("copy", 1, 2) in calls and calls.index(("memcpy",)) < len(calls) - 2


@pytest.mark.parametrize("release", RELEASES)
def test_the_pristine_engine_copies_the_same_and_zeroes_nothing(tmp_path: Path, release: str) -> None:
    patched = _run(_site(tmp_path, release, patched=True))
    assert _run(_site(tmp_path, release, patched=False)) == patched[:-2]
