"""Discrete CQL (a QR-DQN head) trained offline on Atari data, as Tianshou's offline Atari example
runs it, or on the data of any discrete-action task (CartPole-v1).

    python examples/atari_cql.py --load-buffer-name expert.hdf5 --min-q-weight 50
    python examples/atari_cql.py --task Breakout --buffer-from-rl-unplugged --load-buffer-name Breakout_run_1.hdf5
    python examples/atari_cql.py --config configs/cql_authors/atari-1pct.yaml --load-buffer-name 'ckpt_*.hdf5'

The data is a Tianshou buffer (`examples/atari_qrdqn.py --watch --save-buffer-name` collects one),
converted RL Unplugged shards or DQN Replay checkpoints (several combine), a Minari dataset, or a
D4RL-format file with discrete actions. Every flag is a `setting()` of `AtariCQLConfig`,
`OfflineRunConfig` or `DiscreteCQLConfig`; runs are written, resumed and watched as `d4rl_cql.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from offline_rl.cli.atari_cql import config_from_args, load_data_and_env
from offline_rl.cli.main import run_main
from offline_rl.runs.evaluation import EvaluationReporter, human_normalised


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings: flags and an optional preset file; torch and Tianshou load only after this.
    config = config_from_args(argv)
    from offline_rl.algorithms.discrete_cql import CQLQRDQN  # heavy (torch, Tianshou): loaded only when used
    from offline_rl.algorithms.discrete_cql.algorithm import training_bytes  # heavy (torch): likewise
    from offline_rl.runs.session import start_session  # heavy (torch): loaded only when used
    from offline_rl.runs.training import (  # heavy (torch, Tianshou): loaded only when used
        evaluate_or_train,
        require_training_memory,
    )

    session = start_session(config.run)  # device, threads, seeds; the checkpoint to resume from
    if session.finished is not None:  # resumed a run that already trained to its end
        return session.finished

    # 2. The data, and the env it is evaluated on: --task, else the one the data records. Atari
    #    games play by --eval-env's protocol, stacks starting as the data's do.
    data = load_data_and_env(config, session.checkpoint)
    task = data.config.task

    # 3. The algorithm, shaped by the env's spaces: the Nature CNN for frame stacks, an MLP otherwise.
    spaces = (data.env.observation_space, data.env.action_space)
    require_training_memory(training_bytes(*spaces, config.algorithm, data.config.run.batch_size), data.config.run)

    def reporter(algorithm: Any, writer: Any) -> EvaluationReporter:  # each evaluation's line and curves
        return EvaluationReporter(writer=writer, start_values=algorithm.start_values, **human_normalised(task))

    def saved_for(run: Any) -> dict[str, Any]:  # what every checkpoint keeps besides the weights
        return {"config": asdict(replace(data.config, run=run)), "dataset_info": data.info}

    common = {"task": task, "algo_name": "cql", "dataset_name": str(data.info.get("name"))}
    if data.config.run.num_seeds > 1:  # --num-seeds S: S seeds in one batched update, a run folder each
        from offline_rl.runs.seed_runs import train_offline_seeds  # heavy (torch, Tianshou): loaded only when used

        return train_offline_seeds(
            lambda: CQLQRDQN.build(*spaces, config.algorithm, device=session.device), data.buffer, data.make_env,
            data.config.run, reporter, saved_for=saved_for, checkpoint=session.checkpoint, device=session.device,
            **common,
        )  # fmt: skip
    algorithm = CQLQRDQN.build(*spaces, config.algorithm, device=session.device)
    session.restore(algorithm, task=task)
    return evaluate_or_train(
        algorithm,
        data.buffer,
        data.make_env,
        data.config.run,
        lambda writer: reporter(algorithm, writer),
        saved=saved_for(data.config.run),
        checkpoint=session.checkpoint,
        **common,
    )


if __name__ == "__main__":
    run_main(main)
