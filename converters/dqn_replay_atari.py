"""Convert DQN Replay checkpoints (Dopamine replays: the CQL paper's Atari data) to buffers for examples/atari_cql.py.

python converters/dqn_replay_atari.py --task Pong --run-id 1 --checkpoint 0 1 2
python converters/dqn_replay_atari.py --task Pong --fraction 0.01        # the CQL paper's 1% of the data
python converters/dqn_replay_atari.py --replay-dir Pong/1/replay_logs --checkpoint 50 --output pong-50.hdf5

TensorFlow and Dopamine are not needed: the checkpoints' gzip-compressed arrays are read here.
"""

from __future__ import annotations

from offline_rl.cli.convert_dqn_replay import main
from offline_rl.cli.main import run_main

if __name__ == "__main__":
    run_main(main)
