"""Convert RL Unplugged Atari shards (gzip TFRecord) to replay buffers for examples/atari_cql.py.

python converters/rl_unplugged_atari.py --task Breakout --run-id 1 --shard-id 1
python converters/rl_unplugged_atari.py --shard-file run_1-00001-of-00100 --output breakout-1.hdf5

TensorFlow is not needed: the shards are read by offline_rl's own TFRecord reader.
"""

from __future__ import annotations

from offline_rl.cli.convert_rl_unplugged import main
from offline_rl.cli.main import run_main

if __name__ == "__main__":
    run_main(main)
