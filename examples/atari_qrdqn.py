"""Online QR-DQN behaviour policy for Atari, and the offline buffer it plays:

    python examples/atari_qrdqn.py --task PongNoFrameskip-v4
    python examples/atari_qrdqn.py --task PongNoFrameskip-v4 --watch --resume-path log/.../policy.pth \\
        --eps-test 0.2 --buffer-size 1000000 --save-buffer-name expert.hdf5

Without `--resume-path`, `--watch` plays an untrained policy, so the pipeline runs end to end with no
pretrained model. Every flag is a field of `AtariQRDQNConfig` or `RunConfig`; `--help` lists them.
"""

from offline_rl.apps.atari_qrdqn import main
from offline_rl.apps.cli import run_main

if __name__ == "__main__":
    run_main(main)
