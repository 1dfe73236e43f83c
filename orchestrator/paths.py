"""Where vmatrix keeps things: engine venvs and canaries (cache), results (data).

Both can be moved with environment variables so CI and tests can share one cache
of engine venvs while keeping their databases apart.
"""

from __future__ import annotations

import os
from pathlib import Path

# platformdirs is imported where a default folder is needed, not by every `vmatrix`
# command that imports this module (`results compare --db FILE` never asks).


def cache_dir() -> Path:
    if folder := os.environ.get("VMATRIX_CACHE"):
        return Path(folder)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("vmatrix"))


def data_dir() -> Path:
    if folder := os.environ.get("VMATRIX_DATA"):
        return Path(folder)
    from platformdirs import user_data_dir

    return Path(user_data_dir("vmatrix"))


def default_db() -> Path:
    return data_dir() / "results.db"


def runs_dir() -> Path:
    """Per-cell engine logs live next to the results, not in the cache."""
    return data_dir() / "logs"
