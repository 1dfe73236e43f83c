"""Each run of a cell gets an engine log of its own, even when two start in the same second.

A calibrating control runs twice at once (grading.calibrate): on 2026-12-03 both runs of
field-bugs' 0.30.0 control were recorded with one log path, and both engines wrote into
it, so each run's crash signature and reported block were read from a mix of two engines.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from vmatrix.orchestrator.sweep import run_cell
from vmatrix.orchestrator.sweep.run_cell import claim_log


def test_runs_starting_in_the_same_second_get_their_own_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_cell.time, "strftime", lambda fmt: "20261203-064439")
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: claim_log(tmp_path, "9d7fb70a5bce6240"), range(8)))
    assert len(set(paths)) == 8
    assert sorted(p.name for p in paths)[:2] == ["9d7fb70a5bce6240-20261203-064439-2.log",
                                                 "9d7fb70a5bce6240-20261203-064439-3.log"]
    assert (tmp_path / "9d7fb70a5bce6240-20261203-064439.log") in paths
    assert all(p.read_bytes() == b"" for p in paths)


def test_a_log_already_there_is_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_cell.time, "strftime", lambda fmt: "20261203-064439")
    old = tmp_path / "abc-20261203-064439.log"
    old.write_text("an earlier run's engine\n")
    assert claim_log(tmp_path, "abc") == tmp_path / "abc-20261203-064439-2.log"
    assert old.read_text() == "an earlier run's engine\n"
