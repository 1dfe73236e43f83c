"""images/volumes.py: folders travel to the offline host in xz volumes that are checked
against the manifest before anything is written, applied once each, in any order, and a
folder is complete only when its last volume is in (small fake parts written here; the
real overlay and releases are in docs/GPU.md)."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import pytest

from vmatrix.images.volumes import COMPLETE, STATE, apply, main, missing, pack, plan


def _tree(root: Path) -> Path:
    """A folder shaped like an overlay: a big library (noise and a long run of zeros, as a
    blanked fat binary), an executable, an empty file, small modules."""
    rng = random.Random(7)
    folder = root / "_torch-9.13.0"
    (folder / "torch" / "lib").mkdir(parents=True)
    (folder / "torch" / "bin").mkdir()
    (folder / "torch" / "lib" / "libbig.so").write_bytes(rng.randbytes(600_000) + bytes(2_000_000) + rng.randbytes(300_000))
    shm = folder / "torch" / "bin" / "torch_shm_manager"
    shm.write_bytes(rng.randbytes(50_000))
    shm.chmod(0o755)
    (folder / "torch" / "py.typed").write_bytes(b"")
    for i in range(30):
        (folder / "torch" / f"m{i}.py").write_text(f"X = {i}\n" * 200)
    other = root / "vllm-9.9.9"
    other.mkdir()
    (other / "vllm-9.9.9-py3-none-any.whl").write_bytes(rng.randbytes(200_000))
    return folder


def _same(a: Path, b: Path) -> None:
    for f in a.rglob("*"):
        g = b / f.relative_to(a)
        if f.is_file():
            assert g.is_file() and g.read_bytes() == f.read_bytes(), f
            assert (g.stat().st_mode & 0o111) == (f.stat().st_mode & 0o111), f


@pytest.fixture
def packed(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    src = tmp_path / "src"
    folder = _tree(src)
    # Small volumes and lanes, so the big file spans lanes and volumes as the real ones do;
    # preset 1: the real packs use 8, whose 300 MiB of match finder per lane is slow here.
    ups = pack([src / "vllm-9.9.9", folder], tmp_path / "out", target_bytes=150_000, jobs=2, preset=1, lane_bytes=1_000_000)
    return src, tmp_path / "wh", ups


def test_a_folder_is_rebuilt_byte_for_byte_from_volumes_in_any_order(packed) -> None:
    src, wh, ups = packed
    assert len(ups) >= 4
    assert all(len(list(u.glob("*.vol"))) == 1 for u in ups)
    shuffled = ups[:]
    random.Random(1).shuffle(shuffled)
    half = len(shuffled) // 2
    apply(shuffled[:half], wh)
    left, complete = missing(wh)
    assert sorted(left) == sorted(next(u.glob("*.vol")).name for u in shuffled[half:])
    assert not all(complete.values())
    apply(shuffled[half:], wh)
    assert missing(wh) == ([], {"vllm-9.9.9": True, "_torch-9.13.0": True})
    _same(src / "_torch-9.13.0", wh / "_torch-9.13.0")
    _same(src / "vllm-9.9.9", wh / "vllm-9.9.9")
    assert (wh / "_torch-9.13.0" / COMPLETE).is_file()


def test_zeros_and_text_compress_far_below_their_size(packed) -> None:
    src, _, ups = packed
    sent = sum(f.stat().st_size for u in ups for f in u.glob("*.vol"))
    raw = sum(f.stat().st_size for f in src.rglob("*") if f.is_file())
    noise = 600_000 + 300_000 + 50_000 + 200_000  # random bytes do not compress
    assert sent < noise + 150_000 < raw / 2


def test_a_folder_is_not_complete_before_its_last_volume(packed) -> None:
    _, wh, ups = packed
    torch_ups = [u for u in ups if next(u.glob("*.vol")).name.startswith("_torch")]
    apply(torch_ups[:-1], wh)
    assert not (wh / "_torch-9.13.0" / COMPLETE).exists()
    apply(torch_ups[-1:], wh)
    assert (wh / "_torch-9.13.0" / COMPLETE).is_file()
    assert missing(wh)[1] == {"vllm-9.9.9": False, "_torch-9.13.0": True}


def test_an_applied_volume_is_neither_read_nor_written_again(packed) -> None:
    _, wh, ups = packed
    assert apply(ups[:2], wh) == [next(u.glob("*.vol")).name for u in ups[:2]]
    written = {f: f.stat().st_mtime_ns for f in wh.rglob("*") if f.is_file() and f.parent != wh and STATE not in f.parts}
    vol = next(ups[0].glob("*.vol"))
    vol.write_bytes(b"garbage: if this were read, its checksum would fail")
    os.utime(wh, None)
    assert apply(ups[:2], wh) == []
    assert {f: f.stat().st_mtime_ns for f in written} == written


def test_a_volume_that_does_not_match_its_checksum_writes_nothing(packed, capsys) -> None:
    _, wh, ups = packed
    vol = next(ups[3].glob("*.vol"))
    data = bytearray(vol.read_bytes())
    data[-10] ^= 0xFF
    vol.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="broken upload"):
        apply([ups[3]], wh)
    assert not any(f.is_file() for f in wh.rglob("*") if STATE not in f.parts and f.parent != wh)
    assert main(["apply", str(ups[3]), str(wh)]) == 1
    assert "broken upload" in capsys.readouterr().err


def test_the_command_line_says_what_is_complete_and_what_to_send(packed, capsys) -> None:
    _, wh, ups = packed
    assert main(["apply", str(ups[0]), str(wh)]) == 0
    out = capsys.readouterr().out
    first = next(ups[0].glob("*.vol")).name
    assert f"applied 1: {first}" in out and f"missing {len(ups) - 1}:" in out
    assert main(["status", str(wh)]) == 0
    assert first not in capsys.readouterr().out.split("missing")[1]


def test_a_cached_pack_reuses_its_lanes_and_a_changed_file_recompresses_its_own(tmp_path: Path) -> None:
    src = tmp_path / "src"
    folder = _tree(src)
    cache = tmp_path / "cache"
    pack([folder], tmp_path / "o1", 150_000, jobs=1, preset=1, cache=cache, lane_bytes=1_000_000)
    lanes = {d.name: d.stat().st_mtime_ns for d in cache.iterdir()}
    (folder / "torch" / "m3.py").write_text("X = 'changed'\n")
    ups = pack([folder], tmp_path / "o2", 150_000, jobs=1, preset=1, cache=cache, lane_bytes=1_000_000)
    after = {d.name for d in cache.iterdir()}
    assert len(after - set(lanes)) == 1  # only the lane holding m3.py was compressed again
    apply(ups, tmp_path / "wh")
    assert (tmp_path / "wh" / "_torch-9.13.0" / "torch" / "m3.py").read_text() == "X = 'changed'\n"


def test_a_file_two_folders_share_travels_once_and_is_linked_when_its_first_folder_is_in(tmp_path: Path) -> None:
    rng = random.Random(3)
    shared = rng.randbytes(300_000)
    for release, own in (("vllm-9.27.1", b"a"), ("vllm-9.28.0", b"b")):
        folder = tmp_path / "src" / release
        folder.mkdir(parents=True)
        (folder / "dep-1.0-py3-none-any.whl").write_bytes(shared)
        (folder / f"{release}.whl").write_bytes(own * 1000)
    ups = pack([tmp_path / "src" / "vllm-9.27.1", tmp_path / "src" / "vllm-9.28.0"], tmp_path / "out", 150_000,
               jobs=1, preset=1)
    sent = sum(f.stat().st_size for u in ups for f in u.glob("*.vol"))
    assert len(shared) < sent < 1.2 * len(shared)  # the shared wheel once
    wh = tmp_path / "wh"
    second = [u for u in ups if next(u.glob("*.vol")).name.startswith("vllm-9.28.0")]
    first = [u for u in ups if u not in second]
    apply(second, wh)
    assert not (wh / "vllm-9.28.0" / "dep-1.0-py3-none-any.whl").exists()
    assert missing(wh)[1] == {"vllm-9.27.1": False, "vllm-9.28.0": False}
    apply(first, wh)
    assert (wh / "vllm-9.28.0" / "dep-1.0-py3-none-any.whl").read_bytes() == shared
    assert missing(wh) == ([], {"vllm-9.27.1": True, "vllm-9.28.0": True})
    assert (wh / "vllm-9.28.0" / COMPLETE).is_file()


def test_plan_fills_each_call_up_to_its_room_and_leaves_out_what_was_sent(packed, capsys) -> None:
    _, _, ups = packed
    sizes = {u: sum(f.stat().st_size for f in u.iterdir()) for u in ups}
    room = 2 * max(sizes.values())
    calls = plan(ups[0].parent, room)
    assert [u for call in calls for u in call] == ups
    assert all(sum(sizes[u] for u in call) <= room for call in calls)
    # a call closes only when the next upload would not fit
    assert all(sum(sizes[u] for u in a) + sizes[b[0]] > room for a, b in itertools.pairwise(calls))
    first = next(ups[0].glob("*.vol")).name
    assert ups[0] not in [u for call in plan(ups[0].parent, room, {first}) for u in call]
    assert main(["plan", str(ups[0].parent), "--room-mib", str(room / 2**20), "--sent", first]) == 0
    assert str(ups[0]) not in capsys.readouterr().out
    assert main(["plan", str(ups[0].parent), "--room-mib", "0.001"]) == 2
