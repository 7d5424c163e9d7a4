"""Convert a D4RL-format HDF5 file (or a D4RL dataset name) to a Tianshou HDF5 buffer.

python converters/d4rl.py halfcheetah-medium-v2 --output halfcheetah-medium.hdf5
"""

from offline_rl.cli.convert_buffers import convert_d4rl
from offline_rl.cli.main import run_main

if __name__ == "__main__":
    run_main(convert_d4rl)
