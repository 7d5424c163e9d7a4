"""Discrete CQL (QR-DQN head) on an Atari buffer:
`python examples/atari_cql.py --task PongNoFrameskip-v4 --load-buffer-name expert.hdf5 --min-q-weight 50`.

Make the buffer with `examples/atari_qrdqn.py --watch ... --save-buffer-name expert.hdf5`, or convert
RL Unplugged shards with `converters/rl_unplugged_atari.py`. Every flag is a field of
`AtariCQLConfig`, `OfflineRunConfig` or `DiscreteCQLConfig`; `--help` lists them with their defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from offline_rl.apps.atari_cql import config_from_args
from offline_rl.apps.cli import run_main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings: flags and an optional preset file, merged into the config dataclasses.
    config = config_from_args(argv)  # torch and Tianshou load after this: --help answers at once
    from offline_rl.apps.atari_cql import describe_buffer, evaluation_padding, load_atari_buffer, make_evaluation_env
    from offline_rl.apps.evaluation import EvaluationReporter
    from offline_rl.apps.training import evaluate_or_train, start_session
    from offline_rl.data import dataset_info
    from offline_rl.discrete_cql import CQLQRDQN

    session = start_session(config.run)  # device, threads, seeds; the checkpoint to resume from

    # 2. The algorithm, shaped by the game's spaces.
    env = make_evaluation_env(config, padding="reset")
    algorithm = CQLQRDQN.build(env.observation_space, env.action_space, config.algorithm, device=session.device)
    session.restore(algorithm, task=config.task)

    # 3. The data (not needed to only watch a trained policy).
    buffer = None if config.run.watch else load_atari_buffer(config, env)
    names = " ".join(config.load_buffer_name)
    padding = evaluation_padding(buffer, session.checkpoint)  # evaluation stacks start as the data's do
    info = {"name": names, **(dataset_info(buffer) if buffer is not None else {}), "frame_padding": padding}
    if buffer is not None:
        describe_buffer(config, buffer, padding)

    # 4. Tianshou's offline trainer: evaluations, checkpoints, TensorBoard logs, a summary line.
    return evaluate_or_train(
        algorithm,
        buffer,
        lambda **kwargs: make_evaluation_env(config, padding, **kwargs),
        config.run,
        lambda writer: EvaluationReporter(writer=writer),
        task=config.task,
        algo_name="cql",
        saved={"config": asdict(config), "dataset_info": info},
        checkpoint=session.checkpoint,
        dataset_name=str(info.get("name", names)),
    )


if __name__ == "__main__":
    run_main(main)
