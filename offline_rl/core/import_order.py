"""Which third-party libraries load first, so that TensorFlow never slows or crashes a process.

TensorBoard's compatibility layer imports TensorFlow whenever it is installed (the `rlu` extra installs
it) only to write event files, which its built-in stub writes just as well; registering the module
`tensorboard.compat.notf` before anything imports TensorBoard selects the stub
(`use_tensorboard_without_tensorflow`).

torch's CUDA builds load Triton the first time anything reaches `torch._dynamo` (every optimiser's
constructor does). TensorFlow's recent wheels put their own LLVM in the global symbol table, and a Triton
loaded after it binds to that LLVM and crashes the process (tensorflow/tensorflow#124205); loaded
before TensorFlow, both work. `load_triton_before_tensorflow` therefore imports Triton early where both
are installed, and warns where TensorFlow came first and it is too late.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
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


_SWITCH = "tensorboard.compat.notf"


def use_tensorboard_without_tensorflow() -> None:
    sys.modules.setdefault(_SWITCH, types.ModuleType(_SWITCH))
