"""Convert a D4RL-format HDF5 file (or a D4RL dataset name) to a Tianshou HDF5 buffer.

python converters/d4rl.py halfcheetah-medium-v2 --output halfcheetah-medium.hdf5
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

# This script shares its name with a library (`minari`); drop its own folder from the import path
# so `import minari` finds the package, not this file.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).parent.resolve()]

from offline_rl.apps.buffer_conversion import ConversionConfig, run_conversion  # noqa: E402
from offline_rl.apps.cli import run_main  # noqa: E402
from offline_rl.data import load_d4rl  # noqa: E402

SOURCE = "a D4RL HDF5 file or dataset name (e.g. halfcheetah-medium-v2)"


def main(argv: Sequence[str] | None = None) -> int:
    # D4RL names download on demand, as D4RL itself does; a path is read as it is.
    return run_conversion(
        argv,
        ConversionConfig(),
        lambda source, _download: load_d4rl(source, download=True),
        prog="converters/d4rl.py",
        source_help=SOURCE,
    )


if __name__ == "__main__":
    run_main(main)
