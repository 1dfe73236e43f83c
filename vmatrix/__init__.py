"""vmatrix: the one import name of the project.

This folder holds the vocabulary every layer shares (cells, records, recipes, errors ...).
The layers above it live in the repository's top-level folders and are subpackages of
this one: ``vmatrix.images``, ``vmatrix.jobs``, ``vmatrix.db``, ``vmatrix.orchestrator``
(docs/ARCHITECTURE.md). An install maps them here (setup.py). A checkout that is only on
``PYTHONPATH`` (images/offline-host.sh, benchmarks/*.sh, ``PYTHONPATH=. python -m
vmatrix.orchestrator.cli``) has no such mapping, so the finder below gives those four
names their folders beside this one, and nothing else: ``import db`` stays an error.
"""

import os as _os
import sys as _sys

LAYERS = ("images", "jobs", "db", "orchestrator")


def _checkout_finder() -> None:
    root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.isdir(_os.path.join(here, "orchestrator")):
        return  # installed (not editable): the layers are inside this folder
    if not _os.path.isfile(_os.path.join(root, "setup.py")) or not all(
            _os.path.isfile(_os.path.join(root, layer, "__init__.py")) for layer in LAYERS):
        return

    from importlib.machinery import ModuleSpec
    from importlib.util import spec_from_file_location

    class CheckoutLayers:
        """``vmatrix.<layer>`` -> ``<checkout>/<layer>``; its subpackages follow its ``__path__``."""

        @staticmethod
        def find_spec(fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
            parent, _, name = fullname.rpartition(".")
            if parent != __name__ or name not in LAYERS:
                return None
            folder = _os.path.join(root, name)
            return spec_from_file_location(fullname, _os.path.join(folder, "__init__.py"),
                                           submodule_search_locations=[folder])

        @staticmethod
        def invalidate_caches() -> None:
            return None

    _sys.meta_path.append(CheckoutLayers)


_checkout_finder()
