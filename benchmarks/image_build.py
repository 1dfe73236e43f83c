"""Engine image builds: unchanged recipe, forced rebuild on a warm cache, a new patch set.

    python benchmarks/image_build.py --vllm 0.32.0 --base vmatrix/base:bookworm

Needs the Docker daemon and the recipe's image built once (``vmatrix images build``
or a docker sweep). Reports:

- unchanged recipe: ``build_image`` again (what every cell of a sweep does): the tag
  is the content hash of the recipe's build, so this is a look-up;
- forced rebuild: ``docker build`` of the same context (wheelhouse upload included)
  with every layer a cache hit;
- a patch set on the same release: only the patch layer is built, every earlier layer
  comes from the cache (the image is removed afterwards, so the next run measures the
  same thing).
"""

from __future__ import annotations

import argparse
import statistics
import time

from vmatrix.images.build import ImageOptions, build_image, client
from vmatrix.images.recipe import patch_set_digest
from vmatrix.recipe import EngineRecipe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm", default="0.32.0")
    ap.add_argument("--base", default="vmatrix/base:bookworm")
    ap.add_argument("--patches", default="corrupt-prefix-state")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    opts = ImageOptions(base=args.base)
    recipe = EngineRecipe(args.vllm)
    first = build_image(recipe, opts)
    print(f"{first.tag}: {'built' if first.built else 'present'} ({first.seconds:.1f} s)")
    lookups = []
    for _ in range(args.repeat):
        t = time.monotonic()
        again = build_image(recipe, opts)
        lookups.append(time.monotonic() - t)
        assert not again.built
    t = time.monotonic()
    forced = build_image(recipe, opts, force=True)
    forced_s = time.monotonic() - t
    assert forced.image_id == first.image_id, "a cached rebuild must give the same image"
    patched = EngineRecipe(args.vllm, patches=args.patches, patch_digest=patch_set_digest(args.patches))
    t = time.monotonic()
    p = build_image(patched, opts, force=True)
    patched_s = time.monotonic() - t
    client().images.remove(p.tag)
    print(f"unchanged recipe (tag look-up), median of {args.repeat}: {statistics.median(lookups):.3f} s")
    print(f"forced rebuild, all layers cached: {forced_s:.1f} s")
    print(f"new patch set {args.patches} on {args.vllm} (patch layer only): {patched_s:.1f} s")


if __name__ == "__main__":
    main()
