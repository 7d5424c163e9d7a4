"""Keep TensorFlow out of TensorBoard logging.

TensorBoard's compatibility layer imports TensorFlow whenever it is installed (the `rlu` extra
installs it for RL Unplugged) only to write event files, which its built-in stub writes just as well:
seconds of start-up and a screen of TensorFlow log lines in every training process. TensorBoard's own
switch for this is the presence of the module `tensorboard.compat.notf`; registering an empty one
before anything imports `tensorboard` selects the stub. TensorFlow itself keeps working where it is
imported on purpose (the RL Unplugged tests and benchmarks).
"""

from __future__ import annotations

import sys
import types

_SWITCH = "tensorboard.compat.notf"


def use_tensorboard_without_tensorflow() -> None:
    sys.modules.setdefault(_SWITCH, types.ModuleType(_SWITCH))
