"""Blank the GPU code one GPU never loads inside a library's fat binaries, so it compresses away.

A CUDA library carries its kernels once per architecture in ``.nv_fatbin`` containers
(torch 2.13.0's ``libtorch_cuda.so``: 296 of its 448 MiB, for sm_75 to sm_121). An H200
(sm_90) loads only the sm_90 cubins, or PTX of an architecture at most 90 where no cubin
fits; the rest is dead weight on an upload that travels in pieces of a few MiB. Zeroing
those entries' payloads keeps every header, offset and the file's size as they were (the
driver reads the headers to pick an entry and decompresses only the one it picked), and a
run of zeros costs nothing under xz: ``libtorch_cuda.so`` went from 317 MiB deflated in
the wheel to 58 MiB (xz -6) with 245 MiB zeroed (measured 2026-12-03).

The layout (16-byte container header, then entries of a 64-byte or longer header each
followed by their payload) is the one NVIDIA's tools write; a magic number that does not
start a well-formed container is left alone, so a false match cannot damage the file.
Standard library only: the offline host has nothing else.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEADER = struct.Struct("<IHHQ")  # magic, version (1), header size (16), size of the entries that follow
_ENTRY = struct.Struct("<HHIQ")  # kind, version, entry header size, payload size (8-aligned)
_ARCH_AT = 28  # offset of the sm number in an entry header
PTX, ELF = 1, 2
_KINDS = {PTX, ELF, 0x10, 0x40}


@dataclass(frozen=True)
class Entry:
    header_at: int  # offset of the entry's header in the file
    header_size: int
    payload_size: int
    kind: int
    arch: int  # sm number: 90 for sm_90

    @property
    def payload_at(self) -> int:
        return self.header_at + self.header_size


def _container(buf: bytes | mmap.mmap, at: int) -> list[Entry] | None:
    """The entries of the container starting at ``at``, or None where it is not one."""
    magic, version, header_size, size = _HEADER.unpack_from(buf, at)
    end = at + _HEADER.size + size
    if magic != MAGIC or version != 1 or header_size != _HEADER.size or end > len(buf):
        return None
    entries, e = [], at + _HEADER.size
    while e < end:
        if e + 64 > end:
            return None
        kind, _, esize, psize = _ENTRY.unpack_from(buf, e)
        if kind not in _KINDS or esize < 64 or e + esize + psize > end:
            return None
        (arch,) = struct.unpack_from("<I", buf, e + _ARCH_AT)
        entries.append(Entry(e, esize, psize, kind, arch))
        e += esize + psize
    return entries


def entries(buf: bytes | mmap.mmap) -> Iterator[Entry]:
    """Every entry of every well-formed fat binary container in ``buf``, in file order."""
    pos = 0
    while (at := buf.find(_MAGIC_BYTES, pos)) >= 0:
        if at + _HEADER.size > len(buf) or (found := _container(buf, at)) is None:
            pos = at + 1
            continue
        yield from found
        (size,) = struct.unpack_from("<Q", buf, at + 8)
        pos = at + _HEADER.size + size


def loads_on(entry: Entry, sm: int) -> bool:
    """Whether a GPU of compute capability ``sm`` (90: the H200) can load this entry.

    A cubin runs only on its own major version at or above its minor (sm_86 code does
    not run on sm_90); PTX is compiled by the driver for any GPU at or above its own.
    Entries of unknown kinds are kept.
    """
    if entry.kind == PTX:
        return entry.arch <= sm
    if entry.kind == ELF:
        return entry.arch // 10 == sm // 10 and entry.arch <= sm
    return True


def blank_others(path: Path, sm: int) -> int:
    """Zero, in place, the payload of every entry of ``path`` that a GPU of ``sm`` cannot
    load; returns the bytes zeroed now (0 for a file without fat binaries, or one already
    blanked)."""
    size = path.stat().st_size
    if size < _HEADER.size:
        return 0
    with path.open("r+b") as fh, mmap.mmap(fh.fileno(), 0) as buf:
        if buf.find(_MAGIC_BYTES) < 0:
            return 0
        zeroed = 0
        for entry in list(entries(buf)):
            end = entry.payload_at + entry.payload_size
            if not loads_on(entry, sm) and buf[entry.payload_at:end] != bytes(entry.payload_size):
                buf[entry.payload_at:end] = bytes(entry.payload_size)
                zeroed += entry.payload_size
        buf.flush()
    return zeroed


def archs(path: Path) -> dict[tuple[int, int], int]:
    """Payload bytes per (kind, sm) in ``path``'s fat binaries: what a cut would keep."""
    out: dict[tuple[int, int], int] = {}
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for entry in entries(buf):
            out[(entry.kind, entry.arch)] = out.get((entry.kind, entry.arch), 0) + entry.payload_size
    return out
