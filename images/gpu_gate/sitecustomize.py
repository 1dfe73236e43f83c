"""Runs at the start of every Python process of an engine whose PYTHONPATH holds this
folder (vmatrix puts it there for an engine on a GPU shared with other engines): it
installs vmatrix's GPU gate (vmatrix_gpu_gate.py, a scheduling shim; a no-op without
VMATRIX_GPU_GATE), then runs the ``sitecustomize`` this file hides, if the interpreter
has one (Debian's Pythons do), as ``site`` would have.

A file on PYTHONPATH is the one way to run code in every process vLLM starts (the API
server, the engine core, spawned workers: each a fresh interpreter that inherits the
environment); ``.pth`` files are read from site-packages only, which belong to the
engine's environment.
"""

import importlib.machinery
import importlib.util
import os
import sys

import vmatrix_gpu_gate

vmatrix_gpu_gate.install()


def _run_the_hidden_one() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_run_the_hidden_one()
