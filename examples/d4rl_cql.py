"""Train CQL-SAC offline and evaluate it: `python examples/d4rl_cql.py --task HalfCheetah-v4`.

With no `--dataset`, a random-policy dataset is generated for the task (once, then cached). Every
flag is a field of `D4RLCQLConfig`, `OfflineRunConfig` or `CQLSACConfig`; `--help` lists them with
their defaults, and `--config preset.yaml` sets any of them from a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from offline_rl.apps.cli import run_main
from offline_rl.apps.d4rl_cql import config_from_args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings: flags and an optional preset file, merged into the config dataclasses. Torch and
    #    Tianshou load only after this, so --help and flag errors answer at once.
    config = config_from_args(argv)
    from offline_rl.apps.d4rl_cql import load_training_data, make_continuous_env, reference_range
    from offline_rl.apps.evaluation import EvaluationReporter
    from offline_rl.apps.policy_export import export_policy
    from offline_rl.apps.training import evaluate_or_train, start_session
    from offline_rl.cql_sac import CQLSAC
    from offline_rl.data import dataset_info

    session = start_session(config.run)  # device, threads, seeds; the checkpoint to resume from

    # 2. The algorithm, shaped by the task's spaces.
    env = make_continuous_env(config.task)
    algorithm = CQLSAC.build(env.observation_space, env.action_space, config.algorithm, device=session.device)
    session.restore(algorithm, task=config.task)

    # 3. The data (not needed to only watch a trained policy).
    buffer = None if config.run.watch else load_training_data(config)
    info = dataset_info(buffer) if buffer is not None else dict((session.checkpoint or {}).get("dataset_info", {}))
    ref_min, ref_max = reference_range(config.task, info)

    # 4. Tianshou's offline trainer: evaluations, checkpoints, TensorBoard logs, a summary line.
    return evaluate_or_train(
        algorithm,
        buffer,
        lambda **kwargs: make_continuous_env(config.task, **kwargs),
        config.run,
        lambda writer: EvaluationReporter(ref_min, ref_max, writer=writer),
        task=config.task,
        algo_name="cql",
        saved={"config": asdict(config), "dataset_info": info},
        on_best=lambda algo, log_path: export_policy(algo, log_path / "behaviour_policy.pt"),
        checkpoint=session.checkpoint,
        dataset_name=info.get("name"),
    )


if __name__ == "__main__":
    run_main(main)
