"""Discrete CQL (QR-DQN head) on an Atari buffer:
`python examples/atari_cql.py --task PongNoFrameskip-v4 --load-buffer-name expert.hdf5 --min-q-weight 50`.

Make the buffer with `examples/atari_qrdqn.py --watch ... --save-buffer-name expert.hdf5`, or convert
RL Unplugged shards with `converters/rl_unplugged_atari.py`. Every flag is a field of
`AtariCQLConfig`, `OfflineRunConfig` or `DiscreteCQLConfig`; `--help` lists them with their defaults.
"""

from offline_rl.apps.atari_cql import main
from offline_rl.apps.cli import run_main

if __name__ == "__main__":
    run_main(main)
