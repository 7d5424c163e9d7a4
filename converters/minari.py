"""Convert a Minari dataset (id or directory) to a Tianshou HDF5 buffer.

python converters/minari.py mujoco/halfcheetah/medium-v0 --output halfcheetah-medium.hdf5
"""

import sys
from pathlib import Path

# This script shares its name with a library (`minari`); drop its own folder from the import path
# so `import minari` finds the package, not this file.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).parent.resolve()]

from offline_rl.cli.convert_buffers import convert_minari  # noqa: E402
from offline_rl.cli.main import run_main  # noqa: E402

if __name__ == "__main__":
    run_main(convert_minari)
