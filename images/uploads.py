"""Pack a wheelhouse into uploads of bounded size, and put it back together on the host.

Offline GPU hosts take files in uploads of at most ~64 MiB (docs/GPU.md). A
wheelhouse for two releases is ~700 MB, most of it two engine wheels, and the two
releases share most of their dependencies. ``pack`` cuts large files into
``NAME.partNN`` pieces, sends each distinct file once (identical files in several
folders travel once and are linked back on the host), and fills uploads
``u00, u01, ...`` in order, each a tree that mirrors the wheelhouse. ``unpack``
copies an upload into the wheelhouse, then joins pieces and restores links, and
runs after every upload: it finishes whatever is complete so far.

    python -m vmatrix.images.uploads pack OUT FOLDER [FOLDER ...] [--max-mib 58]
    python -m vmatrix.images.uploads unpack UPLOAD WHEELHOUSE
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

MANIFEST = "vmatrix-links.json"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def pack(folders: list[Path], out: Path, max_bytes: int) -> list[Path]:
    """Write uploads under ``out`` for ``folders`` (wheelhouse subfolders, sent in this
    order: a folder is usable on the host once its last upload is in).

    Every upload carries the whole manifest (pieces per joined file, links), so the
    host can finish whatever is complete after any upload.
    """
    first_of: dict[str, str] = {}
    links: dict[str, str] = {}
    joins: dict[str, int] = {}
    if out.exists():
        shutil.rmtree(out)
    uploads: list[Path] = []
    used = max_bytes  # forces the first upload

    def put(rel: str, src: Path, offset: int, length: int) -> None:
        nonlocal used
        if used + length > max_bytes:
            uploads.append(out / f"u{len(uploads):02d}")
            used = 0
        dest = uploads[-1] / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with src.open("rb") as fh:
            fh.seek(offset)
            dest.write_bytes(fh.read(length))
        used += length

    for folder in folders:
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = f"{folder.name}/{f.relative_to(folder)}"
            key = f"{f.name}:{_digest(f)}"
            if key in first_of:
                links[rel] = first_of[key]
                continue
            first_of[key] = rel
            size = f.stat().st_size
            if used + size <= max_bytes or size <= max_bytes // 4:
                put(rel, f, 0, size)
                continue
            # Too big for what is left: fill this upload with a first piece, the rest in
            # full-sized pieces, so no upload travels half empty.
            offset, i = 0, 0
            while offset < size:
                space = max_bytes - used
                if space < (1 << 20):
                    space = max_bytes
                take = min(space, size - offset)
                put(f"{rel}.part{i:02d}", f, offset, take)
                offset += take
                i += 1
            joins[rel] = i
    manifest = json.dumps({"joins": joins, "links": links}, indent=1, sort_keys=True)
    for upload in uploads:
        (upload / MANIFEST).write_text(manifest)
    return uploads


def unpack(upload: Path, wheelhouse: Path) -> list[str]:
    """Copy an upload in, join files whose pieces have all arrived, make the links whose
    targets exist. Returns what is still pending (empty: the wheelhouse is complete)."""
    for f in upload.rglob("*"):
        if f.is_file():
            dest = wheelhouse / f.relative_to(upload)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    manifest = json.loads((wheelhouse / MANIFEST).read_text())
    pending = []
    for rel, count in manifest["joins"].items():
        whole = wheelhouse / rel
        if whole.is_file():
            continue
        parts = [whole.with_name(f"{whole.name}.part{i:02d}") for i in range(count)]
        if not all(p.is_file() for p in parts):
            pending.append(f"{rel} ({sum(p.is_file() for p in parts)}/{count} pieces)")
            continue
        tmp = whole.with_name(whole.name + ".joining")
        with tmp.open("wb") as fh:
            for part in parts:
                fh.write(part.read_bytes())
        tmp.rename(whole)
        for part in parts:
            part.unlink()
    for rel, target in manifest["links"].items():
        src, dest = wheelhouse / target, wheelhouse / rel
        if dest.exists():
            continue
        if not src.is_file():
            pending.append(f"{rel} (needs {target})")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dest)
    return pending


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vmatrix.images.uploads", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="cut FOLDERs (wheelhouse subfolders, in sending order) into uploads under OUT")
    p.add_argument("out", type=Path)
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--max-mib", type=int, default=58)
    u = sub.add_parser("unpack", help="copy UPLOAD into WHEELHOUSE and finish what is complete")
    u.add_argument("upload", type=Path)
    u.add_argument("wheelhouse", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "pack":
        for folder in args.folders:
            if not folder.is_dir():
                print(f"error: {folder}: not a folder", file=sys.stderr)
                return 2
        uploads = pack(args.folders, args.out, args.max_mib << 20)
        for u_ in uploads:
            size = sum(f.stat().st_size for f in u_.rglob("*") if f.is_file())
            print(f"{u_}  {size / 2**20:.1f} MiB")
        return 0
    if not args.upload.is_dir():
        print(f"error: {args.upload}: not a folder", file=sys.stderr)
        return 2
    if not (args.upload / MANIFEST).is_file():
        print(f"error: {args.upload}: not an upload (no {MANIFEST})", file=sys.stderr)
        return 2
    pending = unpack(args.upload, args.wheelhouse)
    done = sorted(d.name for d in args.wheelhouse.iterdir() if d.is_dir()
                  and not any(item.startswith(d.name + "/") for item in pending))
    print(f"complete: {', '.join(done) or '-'}; pending: {len(pending)} file(s)" + (f", e.g. {pending[0]}" if pending else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
