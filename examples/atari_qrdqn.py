"""An online QR-DQN behaviour policy (Tianshou's `QRDQN` on its off-policy trainer), and the offline
dataset it plays: the way to make Atari data locally, as Tianshou's offline Atari example does.

    python examples/atari_qrdqn.py --task PongNoFrameskip-v4                 # train it online
    python examples/atari_qrdqn.py --task PongNoFrameskip-v4 --watch \
        --resume-path log/PongNoFrameskip-v4/qrdqn/0/<stamp>/policy.pth \
        --eps-test 0.2 --buffer-size 1000000 --save-buffer-name expert.hdf5      # play it into a dataset
    python examples/atari_cql.py --load-buffer-name expert.hdf5 --min-q-weight 50   # learn from the dataset offline

Training explores ε-greedily (decaying over `--eps-decay-steps` env steps) into a frame-stacked replay;
its envs clip rewards and its evaluations play whole games with raw rewards. Vector tasks
(`--task CartPole-v1`) get an MLP quantile head and a plain buffer. A run resumes at the epoch, env step
and ε it reached, with the replay it had; a collection kept on disk as it goes continues when the same
command runs again.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from offline_rl.cli.atari_qrdqn import (
    build_qrdqn,
    config_from_args,
    play,
    require_replay_memory,
    train_online,
    update_bytes,
)
from offline_rl.cli.main import run_main
from offline_rl.cli.task_choice import warn_atari_only_settings
from offline_rl.envs.atari import make_discrete_env


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings (a checkpoint's own when resuming), device and seeds, and the checkpoint to start from.
    config = config_from_args(argv)  # torch and Tianshou load after this: --help answers at once
    from offline_rl.runs.session import start_session  # heavy (torch): loaded only when used
    from offline_rl.runs.training import require_training_memory  # heavy (torch, Tianshou): likewise

    session = start_session(config.run)
    if session.finished is not None:  # resumed a run that already trained to its end
        return session.finished

    # 2. The env, and Tianshou's QR-DQN on it: the Nature CNN with a quantile head for frame stacks, an
    #    MLP head for vector tasks. A replay that could not fit in memory is refused now, not hours in.
    warn_atari_only_settings(config.task, config, ("frames_stack", "episode_life"))
    env = make_discrete_env(config.task, config.frames_stack)
    require_replay_memory(config, env)
    require_training_memory(update_bytes(config, env), config.run, training_envs=config.training_num)
    algorithm = build_qrdqn(config, env, session.device)
    session.restore(algorithm, task=config.task)

    # 3. Export the policy, play it (into a dataset with --save-buffer-name), or train it online.
    if config.run.export_policy:
        from offline_rl.runs.policy_export import export_run_policy  # heavy (torch): loaded only when used

        make_env = functools.partial(make_discrete_env, config.task, config.frames_stack)
        return export_run_policy(algorithm.policy, make_env, config.run, task=config.task)
    return play(config, algorithm) if config.run.watch else train_online(config, algorithm, session.checkpoint)


if __name__ == "__main__":
    run_main(main)
