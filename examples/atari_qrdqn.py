"""Online QR-DQN behaviour policy for Atari, and the offline buffer it plays:

    python examples/atari_qrdqn.py --task PongNoFrameskip-v4
    python examples/atari_qrdqn.py --task PongNoFrameskip-v4 --watch --resume-path log/.../policy.pth \\
        --eps-test 0.2 --buffer-size 1000000 --save-buffer-name expert.hdf5

Without `--resume-path`, `--watch` plays an untrained policy, so the pipeline runs end to end with no
pretrained model. Every flag is a field of `AtariQRDQNConfig` or `RunConfig`; `--help` lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offline_rl.apps.atari_qrdqn import build_qrdqn, config_from_args, make_discrete_atari_env, play, train_online
from offline_rl.apps.cli import run_main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings (a checkpoint's own when resuming), device and seeds, and the checkpoint to start from.
    config = config_from_args(argv)  # torch and Tianshou load after this: --help answers at once
    from offline_rl.apps.training import start_session

    session = start_session(config.run)

    # 2. Tianshou's QR-DQN on the Nature CNN with a quantile head.
    env = make_discrete_atari_env(config)
    algorithm = build_qrdqn(config, env, session.device)
    session.restore(algorithm, task=config.task)

    # 3. Play (and collect a dataset with --save-buffer-name), or train online.
    return play(config, algorithm) if config.run.watch else train_online(config, algorithm)


if __name__ == "__main__":
    run_main(main)
