"""The candidate fix PR 48375 as patch sets (images/patches/pr48375/0.25.1, 0.26.0), checked
against the patched release's own ``MambaManager.find_longest_cache_hit``, no engine.

The fixtures are the pristine ``vllm/v1/core/single_type_kv_cache_manager.py`` and
``kv_cache_coordinator.py`` of the CUDA release wheels (``pip download --no-deps vllm==X``,
the files unzipped and gzipped), each held to the sha256 its wheel's RECORD gives it. The
set's real patch file is applied with ``patch -p1`` as orchestrator/runtimes/venvs.py does,
the finder is pulled out of the patched file with ``ast`` and called on a stub block pool
(vLLM is not installed here): cached blocks are a set of block indices, the hit is what the
release's finder returns for them.

What the PR means, as properties of the finder: with ``drop_eagle_block`` unset nothing
changes; with it set, the search starts one block lower (the last matched block is dropped,
as the attention managers pop theirs). The stock finder ignores the flag, which is the bug.
On 0.25.1 the coordinator asks the Mamba group for one block past the candidate (its EAGLE
margin), so the stock hit overruns the attention hit by a block (issue 53912); the patched
one lands back on the candidate.
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import itertools
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vmatrix.images.recipe import patch_files, set_variants

DATA = Path(__file__).resolve().parent / "data" / "vllm-cuda"
FILE = "vllm/v1/core/single_type_kv_cache_manager.py"
COORDINATOR = "vllm/v1/core/kv_cache_coordinator.py"
SET = "pr48375"
# Each file's hash as its wheel's RECORD lists it (urlsafe base64 sha256).
RECORD = {
    ("0.25.1", FILE): "JteNG9RX9-Jt666ykYc0x7HwyigwxNkLBU3_fJQHQbE",
    ("0.25.1", COORDINATOR): "KFHU-0FLqrpodz47zCLUBCOyb5VEOmT2U3DuFn8cg0w",
    ("0.26.0", FILE): "vLJ-OIlTMr9qTFVgjykX65_ZQexaYpwUuINY8Aqt66g",
    ("0.26.0", COORDINATOR): "TI-7NB8L03FO_1TOYz9TTBR1Ig3ssXwMrtQMvQKzUqI",
}
BLOCK = 1600
RELEASES = ("0.25.1", "0.26.0")

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _pristine(release: str, name: str) -> bytes:
    data = gzip.decompress((DATA / release / f"{name}.gz").read_bytes())
    record = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert record == RECORD[(release, name)], f"{release}: {name} is not the release wheel's"
    return data


def _site(tmp: Path, release: str, patched: bool) -> Path:
    site = tmp / release / ("patched" if patched else "pristine")
    dest = site / FILE
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_pristine(release, FILE))
    if patched:
        for f in patch_files(SET, release):
            done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)],
                                  check=False, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "fuzz" not in done.stdout and "offset" not in done.stdout, done.stdout
    return site


class MambaSpec(SimpleNamespace):
    """Stands for vLLM's ``MambaSpec`` in the finder's ``isinstance`` assert."""


def _finder(site: Path) -> Any:
    """The file's ``MambaManager.find_longest_cache_hit`` as a plain function of
    (cls, block_hashes, max_length, ...), annotations dropped (vLLM's types are not
    importable here)."""
    tree = ast.parse((site / FILE).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MambaManager")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "find_longest_cache_hit")
    fn.decorator_list = []
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    fn.returns = None
    # 0.26.0 resolves the request's hashes to the block size first; at alignment ==
    # block size (the cells here) they are the block hashes themselves.
    ns: dict[str, Any] = {"MambaSpec": MambaSpec, "resolve_block_hashes": lambda hashes, *a, **k: hashes}
    exec(compile(ast.Module([fn], []), str(site / FILE), "exec"), ns)  # noqa: S102 - a release's own function
    return ns["find_longest_cache_hit"]


class _Pool:
    """A block pool holding the states of the block indices in ``cached``."""

    null_block = "null"

    def __init__(self, cached: set[int]) -> None:
        self.cached = cached
        self.hash_block_size = BLOCK

    def get_cached_block(self, block_hash: int, group_ids: list[int]) -> list[str] | None:
        return [f"state@{(block_hash + 1) * BLOCK}"] if block_hash in self.cached else None


def _hit(finder: Any, cached: set[int], max_length: int, drop: bool) -> int:
    """Tokens of the hit the finder returns (0.25.1 returns the blocks, 0.26.0 blocks and length)."""
    out = finder(SimpleNamespace(supports_fine_grained_hash_lookup=True), list(range(64)), max_length, [0],
                 _Pool(cached), MambaSpec(block_size=BLOCK), drop, BLOCK)
    blocks = out[0] if isinstance(out[0], tuple) else out
    if blocks[0]:
        assert blocks[0][:-1] == ["null"] * (len(blocks[0]) - 1), "the hit is [null] * i + [state]"
        assert blocks[0][-1] == f"state@{len(blocks[0]) * BLOCK}"
    length = len(blocks[0]) * BLOCK
    if isinstance(out[0], tuple):
        assert out[1] == length
    return length


@pytest.fixture(scope="module")
def finders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Any]:
    tmp = tmp_path_factory.mktemp("pr48375")
    return {(r, p): _finder(_site(tmp, r, p)) for r in RELEASES for p in (False, True)}


def _cases() -> list[tuple[set[int], int]]:
    """Every set of cached blocks among the first 6, every ceiling of 0-7 blocks and a
    token past some."""
    sets = [set(c) for n in range(7) for c in itertools.combinations(range(6), n)]
    return [(s, m) for s in sets for m in (*(b * BLOCK for b in range(8)), 3 * BLOCK + 17)]


def test_the_set_has_a_variant_per_release() -> None:
    assert set_variants(SET) == list(RELEASES)
    for release in RELEASES:
        assert [f.name for f in patch_files(SET, release)] == ["0001-pr48375-honor-drop-eagle-block-in-mamba-manager.patch"]


@pytest.mark.parametrize("release", RELEASES)
def test_stock_finder_ignores_the_drop(finders: dict, release: str) -> None:
    """The bug as upstream describes it: the flag changes nothing in the release's finder."""
    stock = finders[(release, False)]
    assert all(_hit(stock, s, m, True) == _hit(stock, s, m, False) for s, m in _cases())
    assert _hit(stock, {0, 1, 2}, 3 * BLOCK, True) == 3 * BLOCK


@pytest.mark.parametrize("release", RELEASES)
def test_patched_finder_drops_one_block_only_when_asked(finders: dict, release: str) -> None:
    stock, patched = finders[(release, False)], finders[(release, True)]
    for cached, max_length in _cases():
        assert _hit(patched, cached, max_length, False) == _hit(stock, cached, max_length, False)
        assert _hit(patched, cached, max_length, True) == _hit(stock, cached, max(0, max_length - BLOCK), False), \
            (cached, max_length)
    # The last matched state is dropped, an older one taken if it is cached, none below 0.
    assert _hit(patched, {0, 1, 2}, 3 * BLOCK, True) == 2 * BLOCK
    assert _hit(patched, {0, 2}, 3 * BLOCK, True) == BLOCK
    assert _hit(patched, {2}, 3 * BLOCK, True) == 0
    assert _hit(patched, {0}, BLOCK - 1, True) == 0


def test_0251_coordinator_margin_overruns_stock_and_not_patched(finders: dict) -> None:
    """0.25.1's coordinator gives every EAGLE group, Mamba's too, one block past the
    candidate; 0.26.0's gives Mamba none (the pristine files say so). With the attention
    hit at 4 blocks and Mamba states cached through block 6, 0.25.1's stock Mamba hit is 5
    blocks (the overrun), the patched one 4."""
    c025 = _pristine("0.25.1", COORDINATOR).decode()
    c026 = _pristine("0.26.0", COORDINATOR).decode()
    assert "_max_length = min(\n                        curr_hit_length + spec.block_size, max_cache_hit_length" in c025
    assert "if drop_eagle_block and not isinstance(spec, MambaSpec):" in c026
    candidate, cached = 4 * BLOCK, set(range(6))
    assert _hit(finders[("0.25.1", False)], cached, candidate + BLOCK, True) == 5 * BLOCK
    assert _hit(finders[("0.25.1", True)], cached, candidate + BLOCK, True) == 4 * BLOCK
    # 0.26.0: no margin, so stock stays at the candidate and the patch ends a block before it.
    assert _hit(finders[("0.26.0", False)], cached, candidate, True) == 4 * BLOCK
    assert _hit(finders[("0.26.0", True)], cached, candidate, True) == 3 * BLOCK
