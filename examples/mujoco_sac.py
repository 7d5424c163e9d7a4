"""An online SAC behaviour policy on a MuJoCo task (Tianshou's `SAC` on its off-policy trainer, with the
settings of Tianshou's own `examples/mujoco/mujoco_sac.py`): the first step of D4RL's recipe for its
medium, medium-replay and expert datasets.

    python examples/mujoco_sac.py --task HalfCheetah-v4                       # train it online
    python -m offline_rl.collect --task HalfCheetah-v4 \
        --policy log/HalfCheetah-v4/sac/0/<stamp>/snapshots/epoch-0200.pt --output expert.hdf5   # play one
    python examples/d4rl_cql.py --task HalfCheetah-v4 --dataset expert.hdf5   # learn from it offline

The first `--start-timesteps` env steps take uniform random actions, then the policy acts. Each epoch
ends with an evaluation, and each evaluation leaves the policy it scored in the run folder as
`snapshots/epoch-<E>.pt`, its returns listed in `snapshots/returns.json`: the file a medium dataset
picks its policy from (the one that scores about a third of the expert). A run resumes at the epoch
and env step it reached, with the replay it had.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from offline_rl.cli.main import run_main
from offline_rl.cli.mujoco_sac import build_sac, check_env, config_from_args, train_online
from offline_rl.envs.make import make_env


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings (a checkpoint's own when resuming), device and seeds, and the checkpoint to start from.
    config = config_from_args(argv)  # torch and Tianshou load after this: --help answers at once
    from offline_rl.runs.session import start_session  # heavy (torch): loaded only when used

    session = start_session(config.run)
    if session.finished is not None:  # resumed a run that already trained to its end
        return session.finished

    # 2. The env, and Tianshou's SAC on it; a task without continuous actions, or a replay that could not
    #    fit in memory, is refused now.
    env = make_env(config.task)
    check_env(config, env)
    algorithm = build_sac(config, env, session.device)
    session.restore(algorithm, task=config.task)

    # 3. Export the policy, play it, or train it online.
    if config.run.export_policy:
        from offline_rl.runs.policy_export import export_run_policy  # heavy (torch): loaded only when used

        return export_run_policy(
            algorithm.policy, functools.partial(make_env, config.task), config.run, task=config.task
        )
    if config.run.watch:
        from offline_rl.cli.mujoco_sac import play  # heavy (Tianshou, torch) on use: loaded only when used

        return play(config, algorithm)
    return train_online(config, algorithm, env, session.checkpoint)


if __name__ == "__main__":
    run_main(main)
