"""Stage what the offline H200 host needs for a vLLM release, ready for images/volumes.py.

    python -m vmatrix.images.stage release VERSION DEST     DEST/vllm-VERSION: the engine wheel (trimmed,
                                                    blanked for sm_90, stored) and the wheels
                                                    of its dependencies the host lacks (stored)
    python -m vmatrix.images.stage vmatrix DEST              DEST/_vmatrix: vmatrix's own dependencies
    python -m vmatrix.images.stage torch VERSION DEST [--torchvision V]
                                                    DEST/_torch-VERSION: the overlay of a torch
                                                    the host lacks (images/overlay.py)
    python -m vmatrix.images.stage lmcache VERSION DEST --release R [--staged DIR]
                                                    DEST/lmcache-VERSION: LMCache's wheel and
                                                    the dependencies neither the host nor
                                                    vllm-R's folder (DIR) holds

then ``python -m vmatrix.images.volumes pack OUT DEST/_vmatrix DEST/vllm-X DEST/_torch-Y``. The
release step is ../shared/gpu/stage-wheels' logic (the host's package list, the same
skips), run with this machine's pip against the host's Python (3.12, manylinux x86_64).
Wheels are rewritten uncompressed (``--stored``): the volumes' xz packs their contents
far tighter than deflate did.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from vmatrix.images import overlay
from vmatrix.images.trim_wheel import H200_CUTS, trim

HOST_PACKAGES = Path(__file__).resolve().parent / "host-packages.txt"
# Import-time needs the resolver does not see as such; heavy optional kernels left out
# (flashinfer: the engine runs with VLLM_USE_FLASHINFER_SAMPLER=0 and --gdn-prefill-backend
# triton, docs/GPU.md); torch and the CUDA libraries come from the host or the overlay.
ALWAYS = ["apache-tvm-ffi", "torch-c-dlpack-ext"]
SKIP = re.compile(r"^(torch|torchaudio|torchvision|torchcodec|pynvvideocodec|nvidia-.*|cuda-.*|tilelang|tokenspeed-.*"
                  r"|z3-solver|quack-kernels|humming-kernels|fastsafetensors|sentry-sdk|fastapi-cloud-cli"
                  r"|supervisor|flashinfer-.*|triton)$")
PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:", "--platform", "any",
            "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]
for _n in (5, 12, 17, 18, 24, 26, 27, 28, 31, 34, 35):
    PLATFORM += ["--platform", f"manylinux_2_{_n}_x86_64"]
# vmatrix's dependencies the host lacks (pyproject.toml; docker and uv are not imported by a
# local sweep, and the host has uv on its PATH), and Ray's files no sweep loads
# (its Java jars, the dashboard's source maps): docs/GPU.md.
VMATRIX_REQS = ["typer>=0.12,<0.29", "rich>=13", "pydantic>=2.7", "sqlalchemy>=2.0", "alembic>=1.13",
                "prometheus_client>=0.20", "filelock>=3.13", "platformdirs>=4", "ray[default]==2.60.0"]
RAY_CUTS = ("ray/jars/", "ray/rllib/", "ray/dashboard/client/build/")  # Java, RL, the web UI (--include-dashboard=false)
SM = 90
LMCACHE_MANIFEST = "vmatrix-lmcache.json"  # in DEST/lmcache-VERSION: the release it was staged against


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_packages() -> set[str]:
    return {norm(p) for line in HOST_PACKAGES.read_text().splitlines() if not line.startswith("#") for p in line.split()}


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"], check=True)


def _lacking(reqs: list[str], work: Path) -> list[str]:
    """``name==version`` of everything ``reqs`` resolve to that the host lacks."""
    (work / "req.txt").write_text("\n".join(reqs))
    _pip("install", "-q", "--dry-run", "--ignore-installed", "--report", str(work / "r.json"),
         "--target", str(work / "t"), "-r", str(work / "req.txt"), *PLATFORM)
    host = host_packages()
    return [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in json.loads((work / "r.json").read_text())["install"]
            if norm(i["metadata"]["name"]) not in host and not SKIP.match(norm(i["metadata"]["name"]))]


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Requires-Dist: ") and "extra ==" not in ln]


def _metadata_requires(spec: str, work: Path) -> list[str]:
    """``spec``'s own Requires-Dist, extras left out, read from the index's metadata (no wheel
    is fetched: vLLM's is hundreds of MB)."""
    _pip("install", "-q", "--dry-run", "--ignore-installed", "--no-deps", "--report", str(work / "m.json"),
         "--target", str(work / "t"), spec, *PLATFORM)
    meta = json.loads((work / "m.json").read_text())["install"][0]["metadata"]
    return [r for r in meta.get("requires_dist", []) if "extra ==" not in r]


def _unskipped(reqs: list[str]) -> list[str]:
    """``reqs`` less what is never staged (torch, the CUDA libraries, the heavy kernels: SKIP)."""
    return [r for r in reqs if not SKIP.match(norm(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]))]


def _pin(reqs: list[str], name: str) -> str | None:
    for r in reqs:
        if m := re.match(rf"^{name}\s*\(?==\s*([^\s;,)]+)", r):
            return m.group(1)
    return None


def _store(src: Path, dest: Path, cuts: tuple[str, ...] = (), sm: int | None = None) -> None:
    trim(src, dest / src.name, cuts, sm, stored=True)


def release(version: str, dest: Path) -> Path:
    folder = dest / f"vllm-{version}"
    work = Path(tempfile.mkdtemp())
    try:
        _pip("download", "-q", "--no-deps", "-d", str(work / "vllm"), f"vllm=={version}", *PLATFORM)
        wheel = next((work / "vllm").glob("vllm-*.whl"))
        picked = _lacking(_unskipped(_requires(wheel)) + ALWAYS, work)
        _pip("download", "-q", "--no-deps", "-d", str(work / "deps"), *picked, *PLATFORM)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _store(wheel, folder, H200_CUTS, SM)
        for w in sorted((work / "deps").glob("*.whl")):
            _store(w, folder)
    finally:
        shutil.rmtree(work)
    return folder


def vmatrix(dest: Path) -> Path:
    folder = dest / "_vmatrix"
    work = Path(tempfile.mkdtemp())
    try:
        picked = _lacking(VMATRIX_REQS, work)
        _pip("download", "-q", "--no-deps", "-d", str(work / "deps"), *picked, *PLATFORM)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for w in sorted((work / "deps").glob("*.whl")):
            _store(w, folder, RAY_CUTS if w.name.startswith("ray-") else ())
    finally:
        shutil.rmtree(work)
    return folder


def torch(version: str, dest: Path, torchvision: str | None) -> Path:
    """torch, the triton and NCCL it pins, and torchvision (the host's is built for its own
    torch), unpacked into the overlay folder."""
    work = Path(tempfile.mkdtemp())
    try:
        _pip("download", "-q", "--no-deps", "-d", str(work), f"torch=={version}", *PLATFORM)
        reqs = _requires(next(work.glob("torch-*.whl")))
        wanted = [f"{name}=={v}" for name in ("triton", "nvidia-nccl-cu13") if (v := _pin(reqs, name))]
        if torchvision:
            wanted.append(f"torchvision=={torchvision}")
        _pip("download", "-q", "--no-deps", "-d", str(work), *wanted, *PLATFORM)
        folder = dest / f"_torch-{version}"
        shutil.rmtree(folder, ignore_errors=True)
        overlay.build(folder, sorted(work.glob("*.whl")), SM)
    finally:
        shutil.rmtree(work)
    return folder


def _wheel_names(folder: Path) -> dict[str, str]:
    """Normalized name -> version of every wheel in ``folder``."""
    return {norm(name): str(version) for name, version, _, _ in
            (parse_wheel_filename(w.name) for w in folder.glob("*.whl"))}


def lmcache(version: str, dest: Path, release_version: str, staged: Path | None = None) -> Path:
    """LMCache's wheel and the wheels of its dependencies that neither the host nor the staged
    vLLM release holds, into ``dest/lmcache-VERSION`` (installed with the release's folder:
    orchestrator/runtimes/venvs.py). What the release's folder holds is read from ``staged``
    (the folder sent to the host) or, without it, resolved as :func:`release` stages it.

    A package both need is taken from the host or the release, at their version, by name:
    LMCache and vLLM are installed ``--no-deps`` into one venv, and their pins do not resolve
    together (0.5.6's ``opentelemetry-api<=1.40.0`` against vLLM 0.28.0's stack). Such
    differences are kept in the folder's ``vmatrix-lmcache.json`` and printed."""
    folder = dest / f"lmcache-{version}"
    work = Path(tempfile.mkdtemp())
    try:
        if staged is not None:
            if not any(staged.glob("vllm-*.whl")):
                raise ValueError(f"{staged} holds no vLLM wheel: not a staged release folder")
            released = _wheel_names(staged)
        else:
            (work / "release").mkdir()
            pins = _lacking(_unskipped(_metadata_requires(f"vllm=={release_version}", work / "release")) + ALWAYS,
                            work / "release")
            released = {norm(n): v for n, v in (p.split("==") for p in pins)}
        _pip("download", "-q", "--no-deps", "-d", str(work / "lmcache"), f"lmcache=={version}", *PLATFORM)
        wheel = next((work / "lmcache").glob("lmcache-*.whl"))
        wanted = [p.split("==") for p in _lacking(_unskipped(_requires(wheel)), work)]
        picked = [f"{n}=={v}" for n, v in wanted if norm(n) not in released]
        other = {n: {"lmcache": v, "release": released[norm(n)]} for n, v in wanted
                 if norm(n) in released and released[norm(n)] != v}
        if picked:
            _pip("download", "-q", "--no-deps", "-d", str(work / "deps"), *picked, *PLATFORM)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _store(wheel, folder)
        for w in sorted((work / "deps").glob("*.whl")):
            _store(w, folder)
    finally:
        shutil.rmtree(work)
    (folder / LMCACHE_MANIFEST).write_text(json.dumps(
        {"lmcache": version, "release": release_version, "staged": picked, "release_versions": other},
        indent=1, sort_keys=True))
    for n, v in sorted(other.items()):
        print(f"{n}: LMCache's own resolve picks {v['lmcache']}, vllm-{release_version} has {v['release']} (used)")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vmatrix.images.stage", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release")
    r.add_argument("version")
    r.add_argument("dest", type=Path)
    v = sub.add_parser("vmatrix")
    v.add_argument("dest", type=Path)
    t = sub.add_parser("torch")
    t.add_argument("version")
    t.add_argument("dest", type=Path)
    t.add_argument("--torchvision", default=None)
    lm = sub.add_parser("lmcache")
    lm.add_argument("version")
    lm.add_argument("dest", type=Path)
    lm.add_argument("--release", required=True, help="the vLLM release it runs beside (0.28.0)")
    lm.add_argument("--staged", type=Path, default=None,
                    help="that release's staged folder (DEST/vllm-R of `stage release`); default: resolved again")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "release":
            folder = release(args.version, args.dest)
        elif args.cmd == "vmatrix":
            folder = vmatrix(args.dest)
        elif args.cmd == "lmcache":
            folder = lmcache(args.version, args.dest, args.release, args.staged)
        else:
            folder = torch(args.version, args.dest, args.torchvision)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        # pip has printed why above (an unknown version, no wheel for the platform).
        print(f"error: {' '.join(map(str, exc.cmd[3:6]))} ... failed (exit status {exc.returncode}); pip's lines above say why",
              file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"{folder}: {sum(1 for _ in folder.rglob('*'))} entries, {size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
