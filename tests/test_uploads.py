"""Wheelhouse uploads: cut, deduplicated, bounded, and put back together byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

from vmatrix.images.uploads import main, pack, unpack


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "vmatrix-links.json"}


def test_round_trip_in_order(tmp_path: Path) -> None:
    src = tmp_path / "src"
    big = os.urandom(2500)
    shared = os.urandom(300)
    for folder, files in {"vllm-0.26.0": {"vllm-0.26.0.whl": big, "dep-1.whl": shared},
                          "vllm-0.25.1": {"vllm-0.25.1.whl": os.urandom(2200), "dep-1.whl": shared},
                          "_canary": {"m/config.json": b"{}"}}.items():
        for name, data in files.items():
            (src / folder / name).parent.mkdir(parents=True, exist_ok=True)
            (src / folder / name).write_bytes(data)
    order = [src / "_canary", src / "vllm-0.26.0", src / "vllm-0.25.1"]
    uploads = pack(order, tmp_path / "up", max_bytes=1000)
    sizes = [sum(f.stat().st_size for f in u.rglob("*") if f.is_file() and f.name != "vmatrix-links.json")
             for u in uploads]
    assert max(sizes) <= 1000
    # the shared dependency travels once
    assert sum(1 for u in uploads for f in u.rglob("dep-1.whl")) == 1

    wh = tmp_path / "wh"
    pending: list[str] = []
    ready: dict[str, int] = {}
    for i, u in enumerate(uploads):
        pending = unpack(u, wh)
        for release in ("vllm-0.26.0", "vllm-0.25.1"):
            if (wh / release / f"{release}.whl").is_file() and (wh / release / "dep-1.whl").is_file():
                ready.setdefault(release, i)
    assert pending == []
    # the release sent first is usable while the second is still arriving
    assert ready["vllm-0.26.0"] < ready["vllm-0.25.1"] == len(uploads) - 1
    assert _tree(wh) == _tree(src)
    assert not list(wh.rglob("*.part*"))


def test_unpack_refuses_a_folder_that_is_no_upload(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "x").mkdir()
    assert main(["unpack", str(tmp_path / "x"), str(tmp_path / "wh")]) == 2
    assert "not an upload" in capsys.readouterr().err
