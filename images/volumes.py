"""Carry folders to an offline host in small xz volumes, each checked and applied once.

A call to the H200 host carries the checkout (51 MiB now) and at most 64 MiB in all, so a
torch overlay and a vLLM release (about 1.5 GB as installed) travel in pieces of a few
MiB, and every byte saved is device time saved. xz (the standard library's ``lzma``)
packs an installed tree far tighter than a wheel's deflate: ``libtorch_cpu.so`` 418 MiB
is 112 MiB in torch's wheel and 71 MiB as xz, and a fat binary blanked for one GPU
(images/fatbin.py) next to nothing (measured 2026-12-03).

``pack`` cuts each folder's files, in order, into lanes that compress in parallel, and
each lane into volumes of about ``--mib`` compressed: one xz stream of file pieces with
an index of where each piece goes. Every upload folder ``vNNN`` holds one volume and the
manifest (each volume's sha256 and size, which volumes make each folder). ``apply`` on
the host checks a volume against the manifest's sha256 before it writes anything,
writes its pieces in place, and remembers it: a volume already applied is skipped, so a
call may carry any volumes in any order and a lost call is sent again alone. ``status``
says which volumes are still missing, the list to send; ``plan`` groups the upload folders
not yet sent into calls of at most ``--room-mib`` each (what a call may carry beside the
checkout), in sending order. A folder whose volumes are all in gets ``.complete``.

    python -m vmatrix.images.volumes pack OUT FOLDER [FOLDER ...] [--mib 6] [--jobs 2] [--cache DIR]
    python -m vmatrix.images.volumes apply UPLOAD [UPLOAD ...] DEST
    python -m vmatrix.images.volumes status DEST
    python -m vmatrix.images.volumes plan OUT --room-mib R [--sent NAME ...]

Standard library only: the host runs it with nothing installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import struct
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "vmatrix-volumes.json"
STATE = ".vmatrix-volumes"  # in DEST: one file per applied volume, holding its sha256
COMPLETE = ".complete"
_MAGIC = b"VMXVOL1\n"
_LANE_BYTES = 192 << 20  # input per lane: lanes compress in parallel
_FEED = 1 << 20


@dataclass(frozen=True)
class Piece:
    """Bytes [offset, offset + length) of a file of ``size`` bytes, ``rel`` from DEST."""

    rel: str
    offset: int
    length: int
    size: int
    mode: int


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    if links := [f for f in found if f.is_symlink()]:
        raise ValueError(f"{links[0]}: a symbolic link (volumes carry regular files)")
    return found


def _lanes(folder: Path, files: list[Path], lane_bytes: int) -> list[list[Piece]]:
    """``files`` of ``folder``, in order, as pieces grouped into lanes of at most
    ``lane_bytes`` of input (a larger file spans lanes)."""
    lanes: list[list[Piece]] = [[]]
    used = 0
    for f in files:
        rel = f"{folder.name}/{f.relative_to(folder).as_posix()}"
        size, mode = f.stat().st_size, f.stat().st_mode & 0o777
        offset = 0
        while True:
            take = min(size - offset, lane_bytes - used)
            if take or not size:
                lanes[-1].append(Piece(rel, offset, take, size, mode))
                used += take
                offset += take
            if offset >= size:
                break
            lanes.append([])
            used = 0
    return [lane for lane in lanes if lane]


def _write_volume(path: Path, index: list[Piece], data: bytes) -> None:
    head = json.dumps([[p.rel, p.offset, p.length, p.size, p.mode] for p in index]).encode()
    with path.open("wb") as fh:
        fh.write(_MAGIC + struct.pack("<I", len(head)) + head + data)


def _compress_lane(root: str, pieces: list[Piece], dest: str, stem: str, target: int, preset: int) -> list[str]:
    """Compress one lane into volumes ``stem.NNN.vol`` under ``dest``; returns their names.

    A volume closes once its compressed output reaches ``target``; its piece is cut where
    the input stood, so volumes are about ``target`` (xz's buffering adds up to ~1 MiB).
    """
    names: list[str] = []
    comp, out, index = lzma.LZMACompressor(preset=preset), bytearray(), []

    def close() -> None:
        nonlocal comp, out, index
        out += comp.flush()
        name = f"{stem}.{len(names):03d}.vol"
        _write_volume(Path(dest) / name, index, bytes(out))
        names.append(name)
        comp, out, index = lzma.LZMACompressor(preset=preset), bytearray(), []

    for p in pieces:
        start = p.offset
        with (Path(root) / p.rel).open("rb") as fh:
            fh.seek(p.offset)
            pos = p.offset
            while pos < p.offset + p.length:
                chunk = fh.read(min(_FEED, p.offset + p.length - pos))
                out += comp.compress(chunk)
                pos += len(chunk)
                if len(out) >= target and pos < p.offset + p.length:
                    index.append(Piece(p.rel, start, pos - start, p.size, p.mode))
                    close()
                    start = pos
        index.append(Piece(p.rel, start, p.offset + p.length - start, p.size, p.mode))
        if len(out) >= target:
            close()
    if index:
        close()
    return names


def _lane_key(pieces: list[Piece], target: int, preset: int, digests: dict[str, str]) -> str:
    h = hashlib.sha256(f"{target} {preset}".encode())
    for p in pieces:
        h.update(f"{p.rel} {p.offset} {p.length} {p.size} {p.mode} {digests[p.rel]}\n".encode())
    return h.hexdigest()[:24]


def pack(folders: list[Path], out: Path, target_bytes: int, jobs: int = 2, preset: int = 9,
         cache: Path | None = None, lane_bytes: int = _LANE_BYTES) -> list[Path]:
    """Write one upload folder per volume under ``out`` (v000, v001 ... in sending order:
    the folders in the order given); returns them. With ``cache``, a lane whose files,
    sizes and settings are unchanged is not compressed again.

    A file equal (name and content) to one of an earlier folder does not travel again:
    the manifest links it to that one (two releases share ~80 dependency wheels), and
    ``apply`` links it once that folder is in."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    work = cache or out / ".lanes"
    jobs_list: list[tuple[str, Path, str, Path]] = []  # folder, lane folder, stem, root
    digests: dict[str, str] = {}
    first: dict[tuple[str, str], str] = {}
    links: dict[str, str] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for folder in folders:
            root = folder.parent
            files = []
            for f in _files(folder):
                rel = f"{folder.name}/{f.relative_to(folder).as_posix()}"
                digests[rel] = _sha256(f)
                if (twin := first.get((f.name, digests[rel]))) is not None and not twin.startswith(folder.name + "/"):
                    links[rel] = twin
                    continue
                first.setdefault((f.name, digests[rel]), rel)
                files.append(f)
            for k, pieces in enumerate(_lanes(folder, files, lane_bytes)):
                stem = f"{folder.name}.{k:02d}"
                key = _lane_key(pieces, target_bytes, preset, digests)
                lane_dir = work / f"{stem}-{key}"
                jobs_list.append((folder.name, lane_dir, stem, root))
                if (lane_dir / "done").is_file():
                    futures.append(None)
                    continue
                shutil.rmtree(lane_dir, ignore_errors=True)
                lane_dir.mkdir(parents=True)
                futures.append(pool.submit(_compress_lane, str(root), pieces, str(lane_dir), stem, target_bytes, preset))
        for fut, (_, lane_dir, _, _) in zip(futures, jobs_list, strict=True):
            if fut is not None:
                fut.result()
                (lane_dir / "done").write_text("")
    volumes: list[dict[str, object]] = []
    folder_volumes: dict[str, list[str]] = {}
    uploads: list[Path] = []
    for folder_name, lane_dir, stem, _ in jobs_list:
        for vol in sorted(lane_dir.glob(f"{stem}.*.vol")):
            up = out / f"v{len(uploads):03d}"
            up.mkdir()
            shutil.copyfile(vol, up / vol.name)
            uploads.append(up)
            volumes.append({"name": vol.name, "folder": folder_name, "sha256": _sha256(vol), "bytes": vol.stat().st_size})
            folder_volumes.setdefault(folder_name, []).append(vol.name)
    for folder in folders:
        folder_volumes.setdefault(folder.name, [])
    manifest = json.dumps({"volumes": volumes, "folders": folder_volumes, "links": links}, indent=1)
    for up in uploads:
        (up / MANIFEST).write_text(manifest)
    if cache is None:
        shutil.rmtree(work, ignore_errors=True)
    return uploads


def _pieces(data: bytes) -> tuple[list[Piece], int]:
    if not data.startswith(_MAGIC):
        raise ValueError("not a vmatrix volume")
    (n,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    index = [Piece(*row) for row in json.loads(data[start:start + n])]
    return index, start + n


def _write(dest: Path, pieces: list[Piece], payload: Iterator[bytes]) -> None:
    """Write the decompressed stream ``payload`` into the pieces' files, in order."""
    buf, pos = bytearray(), 0
    for p in pieces:
        path = dest / p.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # Owner-writable while volumes arrive: a file's later pieces come in other volumes.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, p.mode | 0o200)
        try:
            os.fchmod(fd, p.mode | 0o200)
            written = 0
            while written < p.length:
                if pos >= len(buf):
                    buf, pos = bytearray(next(payload)), 0
                    continue
                take = min(p.length - written, len(buf) - pos)
                os.pwrite(fd, memoryview(buf)[pos:pos + take], p.offset + written)
                pos += take
                written += take
        finally:
            os.close(fd)


def _stream(data: memoryview) -> Iterator[bytes]:
    """The volume's xz stream decompressed, at most 8 MiB at a time: a blanked library's
    zeros expand a thousandfold, so the output is bounded rather than the input."""
    dec, i = lzma.LZMADecompressor(), 0
    while not dec.eof:
        chunk = b""
        if dec.needs_input:
            if i >= len(data):
                raise ValueError("a volume's xz stream ends early")
            chunk, i = data[i:i + _FEED], i + _FEED
        if out := dec.decompress(chunk, max_length=8 * _FEED):
            yield out


def _manifest(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def applied(dest: Path) -> dict[str, str]:
    """Volume name -> sha256 of every volume applied in ``dest``."""
    state = dest / STATE
    return {f.name: f.read_text().strip() for f in state.iterdir()} if state.is_dir() else {}


def apply(uploads: list[Path], dest: Path) -> list[str]:
    """Apply every volume of ``uploads`` not yet in ``dest``; returns the names applied now.

    A volume is checked against the manifest's sha256 first (ValueError: nothing of it is
    written); one already applied with that sha256 is skipped without being read."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / STATE).mkdir(exist_ok=True)
    done = applied(dest)
    now: list[str] = []
    manifest: dict[str, Any] | None = None
    for up in uploads:
        if not (up / MANIFEST).is_file():
            raise ValueError(f"{up}: not an upload of volumes (no {MANIFEST})")
        manifest = _manifest(up / MANIFEST)
        shutil.copyfile(up / MANIFEST, dest / MANIFEST)
        wanted = {v["name"]: v for v in manifest["volumes"]}
        for vol in sorted(up.glob("*.vol")):
            entry = wanted.get(vol.name)
            if entry is None:
                raise ValueError(f"{vol}: not in the upload's manifest")
            if done.get(vol.name) == entry["sha256"]:
                continue
            data = vol.read_bytes()
            if (digest := hashlib.sha256(data).hexdigest()) != entry["sha256"]:
                raise ValueError(f"{vol}: sha256 {digest[:12]}, the manifest says {entry['sha256'][:12]}: a broken upload")
            pieces, start = _pieces(data)
            _write(dest, pieces, _stream(memoryview(data)[start:]))
            (dest / STATE / vol.name).write_text(digest + "\n")
            done[vol.name] = digest
            now.append(vol.name)
    if manifest is not None:
        _link(manifest, done, dest)
        for folder, ok in _complete(manifest, done, dest).items():
            if ok and not (dest / folder / COMPLETE).exists():
                (dest / folder / COMPLETE).touch()
    return now


def _link(manifest: dict[str, Any], done: dict[str, str], dest: Path) -> None:
    """Make the manifest's links whose target's folder has all its volumes in."""
    for rel, target in manifest.get("links", {}).items():
        there = target.split("/", 1)[0]
        if (dest / rel).exists() or not all(n in done for n in manifest["folders"].get(there, [None])):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(dest / target, dest / rel)
        except OSError:
            shutil.copy2(dest / target, dest / rel)


def _complete(manifest: dict[str, Any], done: dict[str, str], dest: Path) -> dict[str, bool]:
    """Folder -> whether all its volumes are applied and all its links made."""
    linked = {}
    for rel in manifest.get("links", {}):
        folder = rel.split("/", 1)[0]
        linked[folder] = linked.get(folder, True) and (dest / rel).exists()
    return {f: all(n in done for n in names) and linked.get(f, True) for f, names in manifest["folders"].items()}


def missing(dest: Path) -> tuple[list[str], dict[str, bool]]:
    """(volumes of the last manifest not applied yet, in sending order; folder -> complete)."""
    path = dest / MANIFEST
    if not path.is_file():
        return [], {}
    manifest = _manifest(path)
    done = applied(dest)
    names = [v["name"] for v in manifest["volumes"] if v["name"] not in done]
    return names, _complete(manifest, done, dest)


def plan(out: Path, room: int, sent: frozenset[str] | set[str] = frozenset()) -> list[list[Path]]:
    """Upload folders of ``out`` whose volume is not in ``sent``, grouped into calls of at
    most ``room`` bytes each, in sending order (a call closes at the first that does not fit)."""
    calls: list[list[Path]] = []
    used = room
    for up in sorted(p for p in out.iterdir() if p.is_dir() and p.name.startswith("v")):
        vol = next(up.glob("*.vol"))
        if vol.name in sent:
            continue
        size = sum(f.stat().st_size for f in up.iterdir())
        if size > room:
            raise ValueError(f"{up}: {size} bytes, more than a call carries ({room})")
        if used + size > room:
            calls.append([])
            used = 0
        calls[-1].append(up)
        used += size
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vmatrix.images.volumes", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="cut FOLDERs (sent in this order) into xz volumes, one upload folder each")
    p.add_argument("out", type=Path)
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--mib", type=float, default=6, help="compressed size a volume closes at (default 6)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--preset", type=int, default=9)
    p.add_argument("--cache", type=Path, default=None, help="keep compressed lanes here for the next pack")
    a = sub.add_parser("apply", help="apply the volumes of UPLOADs not yet in DEST")
    a.add_argument("paths", type=Path, nargs="+", metavar="UPLOAD ... DEST")
    s = sub.add_parser("status", help="which volumes DEST still lacks")
    s.add_argument("dest", type=Path)
    c = sub.add_parser("plan", help="group OUT's upload folders not yet sent into calls")
    c.add_argument("out", type=Path)
    c.add_argument("--room-mib", type=float, required=True)
    c.add_argument("--sent", nargs="*", default=[], help="volume names the host has (status's list is the rest)")
    args = parser.parse_args(argv)
    if args.cmd == "plan":
        try:
            calls = plan(args.out, int(args.room_mib * 2**20), set(args.sent))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for ups in calls:
            print(" ".join(str(u) for u in ups))
        return 0
    if args.cmd == "pack":
        for folder in args.folders:
            if not folder.is_dir():
                print(f"error: {folder}: not a folder", file=sys.stderr)
                return 2
        uploads = pack(args.folders, args.out, int(args.mib * 2**20), args.jobs, args.preset, args.cache)
        total = 0
        for up in uploads:
            size = sum(f.stat().st_size for f in up.iterdir())
            total += size
            print(f"{up}  {size / 2**20:.2f} MiB  {next(up.glob('*.vol')).name}")
        print(f"{len(uploads)} volumes, {total / 2**20:.1f} MiB")
        return 0
    if args.cmd == "apply":
        if len(args.paths) < 2:
            parser.error("apply needs UPLOAD ... DEST")
        *ups, dest = args.paths
        try:
            now = apply(ups, dest)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"applied {len(now)}: {' '.join(now) or '-'}")
    names, folders = missing(args.dest if args.cmd == "status" else args.paths[-1])
    print(f"complete: {', '.join(f for f, ok in folders.items() if ok) or '-'}; "
          f"missing {len(names)}: {' '.join(names) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
