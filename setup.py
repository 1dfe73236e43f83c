"""One import name: the repository keeps the layers' folders at its top (orchestrator/,
jobs/, db/, images/, beside vmatrix/), and they install as ``vmatrix.orchestrator``,
``vmatrix.jobs``, ``vmatrix.db`` and ``vmatrix.images``, so ``pip install`` puts one
package, ``vmatrix``, into site-packages. Everything else is in pyproject.toml.

A checkout that is not installed (``PYTHONPATH=$REPO``: images/offline-host.sh,
benchmarks/*.sh) finds the same names through ``vmatrix/__init__.py``."""

from setuptools import find_namespace_packages, setup

LAYERS = ("orchestrator", "jobs", "db", "images")

packages = ["vmatrix"] + [
    f"vmatrix.{name}"
    for layer in LAYERS
    for name in find_namespace_packages(include=[layer, f"{layer}.*"], exclude=["*__pycache__*"])
]

setup(packages=packages, package_dir={f"vmatrix.{layer}": layer for layer in LAYERS})
