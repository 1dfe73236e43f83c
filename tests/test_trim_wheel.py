"""images/trim_wheel.py: the cuts that let a CUDA vLLM wheel travel in fewer uploads leave
the rest of the wheel byte for byte, and RECORD lists exactly what is left (a wheel built
here, not a real vLLM wheel: the real trim of 0.26.0 is in docs/GPU.md)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from vmatrix.images.trim_wheel import H200_CUTS, main, trim

KEPT = {
    "vllm/__init__.py": b"__version__ = '0.26.0'\n",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": b"\x7fELF fa3",
    "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so": b"\x7fELF 312",
    "vllm-0.26.0.dist-info/METADATA": b"Name: vllm\nVersion: 0.26.0\n",
}
CUT = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"\x7fELF fa2",
    "vllm/vllm-rs": b"\x7fELF rs",
    "vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so": b"\x7fELF 313",
    "vllm/third_party/fmha_sm100/cutlass/include/cute/a.hpp": b"// sm100",
}


def _wheel(path: Path) -> None:
    files = KEPT | CUT
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
    record += "vllm-0.26.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("vllm-0.26.0.dist-info/RECORD", record)


def test_the_cuts_go_from_the_wheel_and_its_record_and_nothing_else_changes(tmp_path: Path) -> None:
    src, dest = tmp_path / "in.whl", tmp_path / "out.whl"
    _wheel(src)
    assert sorted(trim(src, dest)) == sorted(CUT)
    with zipfile.ZipFile(dest) as z:
        assert set(z.namelist()) == set(KEPT) | {"vllm-0.26.0.dist-info/RECORD"}
        assert all(z.read(name) == data for name, data in KEPT.items())
        listed = {ln.split(",")[0] for ln in z.read("vllm-0.26.0.dist-info/RECORD").decode().splitlines()}
    assert listed == set(KEPT) | {"vllm-0.26.0.dist-info/RECORD"}
    assert not any(name.startswith(H200_CUTS) for name in listed)


def test_prefixes_on_the_command_line_replace_the_h200_cuts(tmp_path: Path, capsys) -> None:
    src, dest = tmp_path / "in.whl", tmp_path / "out.whl"
    _wheel(src)
    assert main([str(src), str(dest), "vllm/vllm-rs"]) == 0
    with zipfile.ZipFile(dest) as z:
        assert "vllm/vllm-rs" not in z.namelist()
        assert "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" in z.namelist()
    assert "1 files dropped" in capsys.readouterr().out
    assert main([str(src)]) == 2


def test_sm_blanks_other_gpus_code_and_record_follows_and_stored_is_still_a_wheel(tmp_path: Path) -> None:
    import base64
    import hashlib
    import struct

    from vmatrix.images.fatbin import MAGIC, archs

    def entry(sm: int, fill: int) -> bytes:
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, 64)
        struct.pack_into("<I", head, 28, sm)
        return bytes(head) + bytes([fill]) * 64

    body = entry(80, 1) + entry(90, 2) + entry(120, 3)
    lib = b"\x7fELF" + struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body
    src, dest = tmp_path / "in.whl", tmp_path / "out.whl"
    files = {"vllm/_C.abi3.so": lib, "vllm/__init__.py": b"x = 1\n"}
    record = "".join(f"{n},sha256=old,{len(d)}\n" for n, d in files.items()) + "vllm-0.27.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("vllm-0.27.1.dist-info/RECORD", record)
    assert main([str(src), str(dest), "vllm/none", "--sm", "90", "--stored"]) == 0
    with zipfile.ZipFile(dest) as z:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        blanked = z.read("vllm/_C.abi3.so")
        lines = z.read("vllm-0.27.1.dist-info/RECORD").decode().splitlines()
        assert z.read("vllm/__init__.py") == b"x = 1\n"
    assert len(blanked) == len(lib) and bytes([2]) * 64 in blanked
    assert bytes([1]) * 64 not in blanked and bytes([3]) * 64 not in blanked
    (tmp_path / "lib.so").write_bytes(blanked)
    assert set(archs(tmp_path / "lib.so")) == {(2, 80), (2, 90), (2, 120)}  # headers kept
    digest = base64.urlsafe_b64encode(hashlib.sha256(blanked).digest()).rstrip(b"=").decode()
    assert f"vllm/_C.abi3.so,sha256={digest},{len(blanked)}" in lines
    assert "vllm/__init__.py,sha256=old,6" in lines
    assert main([str(src), str(dest), "--sm"]) == 2
