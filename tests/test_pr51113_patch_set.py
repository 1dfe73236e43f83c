"""The candidate fix PR 51113 as patch sets (images/patches/pr51113/0.26.0, 0.25.1), checked
with the PR's own unit-test cases against the patched release's function, no engine.

The fixtures are the pristine ``vllm/v1/core/sched/scheduler.py`` of three CUDA release
wheels (``pip download --no-deps vllm==X``, the one file unzipped and gzipped), each held
to the sha256 its wheel's RECORD gives it (below). The test applies the set's real patch
file with ``patch -p1`` as orchestrator/runtimes/venvs.py does, pulls
``Scheduler._mamba_block_aligned_split`` out of the patched file with ``ast`` and calls it
unbound on a stub ``self``, as upstream's ``tests/v1/core/test_mamba_align_chunk_split.py``
does.

Upstream's test drives the real ``KVCacheManager``; vLLM is not installed here, so its
manager is replaced by the rule the test states (its module docstring): in align mode the
state is written at chunk ends into the running slot (``cdiv(end, block) - 1``), slots
skipped by a chunk are null, and once the prefill has passed ``(p + 1) * block`` tokens a
non-null slot ``p`` is published under that boundary's hash. A slot published while it
holds another offset's state is the poisoning of vLLM issue 43559. The cases (prompt
lengths, budgets, resume points, block sizes) are upstream's: the 20 of the five tests
the PR added (read at vllm-project/vllm 09f730d0, which also has later tests for
features newer than 0.27.0, left out here).
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vmatrix.images.recipe import patch_files, set_variants

DATA = Path(__file__).resolve().parent / "data" / "vllm-cuda"
FILE = "vllm/v1/core/sched/scheduler.py"
SET = "pr51113"
# The file's hash as each wheel's RECORD lists it (urlsafe base64 sha256, as wheels write it).
WHEELS = {
    "0.25.1": ("vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl", "4l1MmpWr2-jlFnFO0CV02SnKDV6MEcTMc7hNOjuQVEM"),
    "0.26.0": ("vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl", "LtKlULZViySV7ahFqXrji88CJQJ7niX78A_DiAwdOUE"),
    "0.27.0": ("vllm-0.27.0-cp38-abi3-manylinux_2_28_x86_64.whl", "xnvaKIa1KGXdr6uq59eXw1npMHUvN0Qhoz5TfZSl9Fo"),
}
MAMBA_BLOCK = 1600  # upstream's: Qwen3.6-27B's mamba block, MTP with 3 draft tokens
HASH_BLOCK = 16

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def _pristine(release: str) -> bytes:
    data = gzip.decompress((DATA / release / f"{FILE}.gz").read_bytes())
    record = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert record == WHEELS[release][1], f"{release}: not the file of {WHEELS[release][0]}"
    return data


def _site(tmp: Path, release: str, patched: bool) -> Path:
    site = tmp / release / ("patched" if patched else "pristine")
    dest = site / FILE
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_pristine(release))
    if patched:
        for f in patch_files(SET, release):
            done = subprocess.run(["patch", "-p1", "--forward", "--batch", "-d", str(site), "-i", str(f)],
                                  check=False, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "fuzz" not in done.stdout, done.stdout
    return site


def _split_fn(site: Path) -> Any:
    """The file's ``Scheduler._mamba_block_aligned_split``, annotations dropped (``Request``
    is not importable here), as a plain function of (self, request, num_new_tokens, ...)."""
    tree = ast.parse((site / FILE).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_mamba_block_aligned_split")
    for a in fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    fn.returns = None
    ns: dict[str, Any] = {}
    exec(compile(ast.Module([fn], []), str(site / FILE), "exec"), ns)  # noqa: S102 - a release's own function
    return ns["_mamba_block_aligned_split"]


@pytest.fixture(scope="module")
def functions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pr51113")
    return {"0.25.1": _split_fn(_site(tmp, "0.25.1", True)), "0.26.0": _split_fn(_site(tmp, "0.26.0", True)),
            "0.25.1 pristine": _split_fn(_site(tmp, "0.25.1", False)),
            "0.26.0 pristine": _split_fn(_site(tmp, "0.26.0", False)),
            "0.27.0": _split_fn(_site(tmp, "0.27.0", False))}


def _stub(block: int, use_eagle: bool = True, partial_hit: bool = False) -> SimpleNamespace:
    """What the split reads of the scheduler, in every release here (upstream's stub, plus
    0.25.1's and 0.26.0's names)."""
    return SimpleNamespace(cache_config=SimpleNamespace(block_size=block), use_eagle=use_eagle,
                           max_num_scheduled_tokens=16384,
                           scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
                           mamba_partial_cache_hit=partial_hit, hash_block_size=HASH_BLOCK)


def _request(prompt_len: int, computed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(num_computed_tokens=computed, num_prompt_tokens=prompt_len, num_tokens=prompt_len,
                           shared_prefix_boundary=0)


def _prefill(split: Any, prompt_len: int, budgets: list[int], block: int = MAMBA_BLOCK) -> tuple[int, list[str]]:
    """Prefill one request, a step per budget (then whole), under the align-mode slot rule of
    the module docstring. Returns (slots published, the poisoned ones)."""
    req, stub = _request(prompt_len), _stub(block)
    state: dict[int, int] = {}  # slot -> the token offset of the state it holds
    published: dict[int, int] = {}  # slot -> the offset its hash claims
    for step in range(len(budgets) + 64):
        start = req.num_computed_tokens
        if start >= prompt_len:
            break
        budget = budgets[step] if step < len(budgets) else prompt_len
        num_new = split(stub, req, min(prompt_len - start, budget))
        if num_new == 0:  # the budget cannot fund an aligned chunk: deferred to a later step
            continue
        end = req.num_computed_tokens = start + num_new
        state[-(-end // block) - 1] = end
        for slot in state:
            if slot not in published and (slot + 1) * block <= end:
                published[slot] = (slot + 1) * block
    assert req.num_computed_tokens == prompt_len, "prefill did not complete"
    poisoned = [f"slot {s} published as state@{claim} holds state@{state[s]}"
                for s, claim in published.items() if state[s] != claim]
    return len(published), poisoned


def _resume_ends(split: Any, resume_at: int, partial_hit: bool, prompt_len: int = 3602) -> list[str]:
    """Upstream's unaligned-resume case: the problems of a prefill resuming at RESUME_AT."""
    req, stub = _request(prompt_len), _stub(MAMBA_BLOCK, partial_hit=partial_hit)
    tail = prompt_len // HASH_BLOCK * HASH_BLOCK
    pos, ends, problems = resume_at, [], []
    while pos < prompt_len:
        req.num_computed_tokens = pos
        num_new = split(stub, req, prompt_len - pos)
        if num_new <= 0:
            return problems + [f"no progress at {pos}"]
        if pos % MAMBA_BLOCK and pos + num_new > (pos // MAMBA_BLOCK + 1) * MAMBA_BLOCK:
            problems.append(f"chunk [{pos}, {pos + num_new}) starts mid-block and runs past its block")
        pos += num_new
        ends.append(pos)
    problems += [f"intermediate chunk end {e} is off the block grid" for e in ends[:-1]
                 if e % MAMBA_BLOCK and not (partial_hit and e == tail)]
    return problems


# Upstream's cases: (name, run) with run(split) -> the problems found, [] when it holds.
def _case_prefill(prompt_len: int, budgets: list[int], block: int = MAMBA_BLOCK, must_publish: bool = True):
    def run(split: Any) -> list[str]:
        count, poisoned = _prefill(split, prompt_len, budgets, block)
        return poisoned + ([] if count or not must_publish else ["no boundary state was published"])
    return run


CASES = {
    "fragmented_first_chunk": _case_prefill(2002, [364, 2002], must_publish=False),
    "fragmented_tail_chunk": _case_prefill(3602, [1600, 1000, 3602]),
    **{f"intermediate_chunk_ends[{fc}]": _case_prefill(2002, [fc, 2002, 2002], must_publish=False)
       for fc in (800, 900, 1599, 1601, 2000)},
    **{f"block_size_independent[{b}-{p}]": _case_prefill(p, budgets, b)
       for b, p, budgets in ((1536, 30000, [27648, 1024, 30000]), (12288, 30000, [12288, 4000, 30000]),
                             (12288, 41000, [24576, 8000, 41000]))},
    **{f"unaligned_resume[{r}-{'partial' if ph else 'block'}]":
       (lambda split, r=r, ph=ph: _resume_ends(split, r, ph))
       for ph in (False, True) for r in (331, 1599, 1601, 2531, 3011)},
}


def test_the_set_has_a_variant_for_each_release_it_is_ported_to() -> None:
    assert set_variants(SET) == ["0.25.1", "0.26.0"]


@pytest.mark.parametrize("release", ["0.26.0", "0.25.1"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_prs_cases_hold_on_the_patched_release(functions: dict[str, Any], release: str, case: str) -> None:
    assert CASES[case](functions[release]) == []


@pytest.mark.parametrize("release", ["0.26.0", "0.25.1"])
def test_the_pristine_release_fails_the_prs_poisoning_cases(functions: dict[str, Any], release: str) -> None:
    """The cases can fail: without the set both releases poison the prefix cache as 43559 says,
    in 14 of the 20 cases (what a field report measured with upstream's test and manager
    against an unpatched scheduler); 0.27.0, which has the PR, in none."""
    pristine = functions[f"{release} pristine"]
    failing = sorted(name for name, run in CASES.items() if run(pristine))
    assert {"fragmented_first_chunk", "fragmented_tail_chunk", "intermediate_chunk_ends[800]"} <= set(failing)
    assert {name for name in failing if name.startswith("block_size_independent")} == {
        name for name in CASES if name.startswith("block_size_independent")}
    assert len(failing) == 14, failing
    assert [name for name, run in CASES.items() if run(functions["0.27.0"])] == []


def test_the_0_26_0_set_gives_the_chunk_ends_of_the_0_27_0_release(functions: dict[str, Any]) -> None:
    """0.26.0 + the set splits as the first release with the PR does (0.27.0's other change
    there, PR 50000, is inert while a block fits the chunk limit, as here)."""
    patched, released = functions["0.26.0"], functions["0.27.0"]
    differ = []
    for eagle in (True, False):
        stub = _stub(MAMBA_BLOCK, use_eagle=eagle)
        for prompt_len in (900, 1600, 2002, 3200, 3602, 5000):
            for start in range(0, prompt_len, 137):
                for num_new in (1, 100, 364, 1599, 1600, 1601, 2002, 4000):
                    num_new = min(num_new, prompt_len - start)
                    a = patched(stub, _request(prompt_len, start), num_new)
                    b = released(stub, _request(prompt_len, start), num_new)
                    if a != b:
                        differ.append((eagle, prompt_len, start, num_new, a, b))
    assert differ == []


def test_the_0_25_1_port_gives_the_chunk_ends_of_the_0_27_0_release_from_block_starts(
        functions: dict[str, Any]) -> None:
    """From a block-aligned start (every start but a resume from external tokens on 0.25.1,
    which has no partial hits), the port splits as 0.27.0 does; from a mid-block start it
    may defer a sub-block chunk where 0.27.0 runs it (the set's header says why)."""
    port, released = functions["0.25.1"], functions["0.27.0"]
    differ = []
    for eagle in (True, False):
        stub = _stub(MAMBA_BLOCK, use_eagle=eagle)
        for prompt_len in (900, 1600, 2002, 3200, 3602, 5000, 9999):
            for start in range(0, prompt_len, MAMBA_BLOCK):
                for num_new in (1, 100, 364, 1599, 1600, 1601, 2002, 3300, 4000, 9999):
                    num_new = min(num_new, prompt_len - start)
                    a = port(stub, _request(prompt_len, start), num_new)
                    b = released(stub, _request(prompt_len, start), num_new)
                    if a != b:
                        differ.append((eagle, prompt_len, start, num_new, a, b))
    assert differ == []
    # 0.25.1's own Marconi admission still shortens a chunk to the common prefix, block-floored.
    stub = _stub(MAMBA_BLOCK)
    assert port(stub, _request(9999), 9999, 0, 0, 3500) == 3200
