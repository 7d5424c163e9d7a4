"""Load Triton before TensorFlow, so that a process holding both does not crash.

torch's CUDA builds ship Triton, and torch imports it the first time anything reaches torch._dynamo:
every optimizer's constructor does. TensorFlow's wheels from 2.20 on load its library with its own
LLVM in the global symbol table; a Triton loaded after it binds to that LLVM and the process dies in
the import (a segmentation fault with TensorFlow 2.21, Triton 3.8 and torch 2.14.1; an abort with
Triton 3.9 and torch 2.15; tensorflow/tensorflow#124205). Loaded before TensorFlow, both work. The
`rlu` extra installs TensorFlow beside torch, and the RL Unplugged tests import it, so a GPU machine
running the README's test command crashed at the first optimizer after them.

Importing Triton costs ~0.2 s, so it is loaded early only where TensorFlow is installed too (CPU
builds of torch have no Triton: nothing happens there). Where TensorFlow is already loaded and
Triton is not, it is too late to load Triton safely: a warning says why the process will crash and
what avoids it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import warnings

TENSORFLOW_CAME_FIRST = (
    "TensorFlow was imported before offline_rl (importing Tianshou imports it through TensorBoard when it is "
    "installed), and torch's Triton, which torch loads at the first optimizer, crashes a process that loaded "
    "TensorFlow first (tensorflow/tensorflow#124205): import offline_rl before tianshou and tensorflow, "
    "or uninstall tensorflow"
)


def installed(name: str) -> bool:
    """Whether `name` can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that fails to import, or a module set to None
        return False


def load_triton_before_tensorflow() -> None:
    """Import Triton now where TensorFlow may be imported later in this process; warn where that is too late."""
    if sys.modules.get("triton") is not None:
        return
    if sys.modules.get("tensorflow") is not None:
        if installed("triton"):
            warnings.warn(TENSORFLOW_CAME_FIRST, RuntimeWarning, stacklevel=3)
        return
    if installed("tensorflow") and installed("triton"):
        with contextlib.suppress(Exception):  # a broken Triton is torch's to report, when torch needs it
            importlib.import_module("triton")
