"""Shared fixtures. Engine tests reuse the cache of engine venvs and canaries
(VMATRIX_CACHE, default ~/.cache/vmatrix) so a second run builds nothing; results
databases and logs always go to a fresh temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMATRIX_DATA", str(tmp_path / "data"))
