"""Discrete CQL (QR-DQN head) on an Atari buffer:
`python examples/atari_cql.py --task PongNoFrameskip-v4 --load-buffer-name expert.hdf5 --min-q-weight 50`.

Make the buffer with `examples/atari_qrdqn.py --watch ... --save-buffer-name expert.hdf5`. All
flags: `--help`; the logic lives in `offline_rl.discrete_cql.experiment`.
"""

from offline_rl.cli import run_main
from offline_rl.discrete_cql.experiment import main

if __name__ == "__main__":
    run_main(main)
