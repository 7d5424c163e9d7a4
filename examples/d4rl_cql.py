"""CQL-SAC trained offline on a continuous-action dataset, and evaluated in gymnasium.

    python examples/d4rl_cql.py --task HalfCheetah-v4
    python examples/d4rl_cql.py --dataset hopper-medium-v2 --config configs/cql/hopper-medium-v2.yaml
    python examples/d4rl_cql.py --watch --resume-path log/HalfCheetah-v4/cql/0/<stamp>/policy_last.pth

With no `--dataset`, a random-policy dataset is generated for `--task` (once, then cached). Every
flag is a `setting()` of `D4RLCQLConfig`, `OfflineRunConfig` or `CQLSACConfig`: `--help` lists them,
`--config preset.yaml` sets any of them from a file. A run writes `<logdir>/<task>/cql/<seed>/<stamp>/`:
TensorBoard curves, `checkpoint.pth` after every epoch (`--resume-path` continues from it),
`policy.pth` at the best evaluation, `policy_last.pth` and `summary.json` at the end, and
`behaviour_policy.pt`, the actor as a policy file `python -m offline_rl.collect --policy` can play.

The same steps train every continuous algorithm: `d4rl_td3_bc.py` and `d4rl_bc.py` call `train_offline`
below with their own settings and algorithm. With `--online-steps N` (here and in `d4rl_iql.py`) the run
goes on fine-tuning online in the env after its offline epochs, in the same folder (step 5):

    python examples/d4rl_cql.py --config configs/finetune/cal_ql/antmaze-umaze-v2.yaml
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from gymnasium.spaces.utils import flatdim

from offline_rl.cli.continuous_data import DEFAULT_TASK, load_training_data, make_continuous_env, reference_range
from offline_rl.cli.d4rl_cql import config_from_args
from offline_rl.cli.main import run_main
from offline_rl.envs.make import recorded_evaluation_spec, say_recorded_settings
from offline_rl.runs.evaluation import EvaluationReporter


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # 1. Settings: flags and an optional preset file. torch and Tianshou load only after this, so
    #    `--help` and a mistyped flag answer at once.
    config = config_from_args(argv)
    from offline_rl.algorithms.cql_sac import CQLSAC  # heavy (torch, Tianshou): loaded only when used

    return train_offline(config, CQLSAC, algo_name="cql")


def train_offline(config: Any, algorithm_class: Any, *, algo_name: str) -> dict[str, Any]:
    """Steps 2-5 for any continuous algorithm: `config` holds the data settings, `run` and `algorithm`
    (`algorithm_class.build` makes the algorithm from the last), and `finetune` where the program fine-tunes
    online; runs go to <logdir>/<task>/<algo_name>/."""
    from offline_rl.data import dataset_info  # heavy (torch, Tianshou): loaded only when used
    from offline_rl.runs.finetune import fine_tune, fine_tuning_finished  # heavy (torch): loaded only when used
    from offline_rl.runs.policy_export import export_behaviour_policy  # heavy (torch): loaded only when used
    from offline_rl.runs.session import start_session  # heavy (torch): loaded only when used
    from offline_rl.runs.training import (  # heavy (torch, Tianshou): loaded only when used
        evaluate_or_train,
        require_training_memory,
    )

    # The device, torch's threads and arithmetic, every seed; and the checkpoint a --resume-path names.
    # With --online-steps the run goes on fine-tuning online after its offline epochs.
    finetune = getattr(config, "finetune", None)
    fine_tunes = finetune is not None and finetune.fine_tunes and config.run.trains
    session = start_session(config.run, then_online=fine_tunes)
    if fine_tunes and (done := fine_tuning_finished(session.checkpoint, finetune, str(config.run.resume_path))):
        return done
    if session.finished is not None and not fine_tunes:  # resumed a run that already trained to its end
        return session.finished

    # 2. The data, checked against the env it is evaluated on (--task, else the env the data belongs
    #    to). Watching or exporting a trained policy needs none: its checkpoint describes the data.
    if config.run.needs_data:
        buffer, task = load_training_data(config)
        info = dataset_info(buffer)
    else:
        buffer, task = None, config.task or DEFAULT_TASK
        info = dict((session.checkpoint or {}).get("dataset_info", {}))
    config = replace(config, task=task)  # saved as resolved: a resume or a results table reads it
    ref_min, ref_max = reference_range(task, info)  # D4RL's random and expert returns, for the score

    # 3. The env, as the dataset records it where it does (a maze's fixed goal), and the algorithm
    #    shaped by its spaces, with the checkpoint's weights when resuming.
    spec = recorded_evaluation_spec(task, info)
    say_recorded_settings(spec)
    env = make_continuous_env(task, spec)
    obs_dim, act_dim = flatdim(env.observation_space), flatdim(env.action_space)
    require_training_memory(config.algorithm.training_bytes(obs_dim, act_dim, config.run.batch_size), config.run)

    def build() -> Any:
        return algorithm_class.build(env.observation_space, env.action_space, config.algorithm, device=session.device)

    def reporter(algorithm: Any, writer: Any) -> EvaluationReporter:  # each evaluation's line and curves
        return EvaluationReporter(ref_min, ref_max, writer=writer, start_values=algorithm.start_values)

    def saved_for(run: Any) -> dict[str, Any]:  # what every checkpoint keeps besides the weights
        return {"config": asdict(replace(config, run=run)), "dataset_info": info}

    make_env = lambda **kwargs: make_continuous_env(task, spec, **kwargs)  # noqa: E731
    on_best = lambda algo, folder: export_behaviour_policy(algo, folder / "behaviour_policy.pt", task=task)  # noqa: E731
    common = {"task": task, "algo_name": algo_name, "on_best": on_best, "dataset_name": info.get("name")}

    # 4. Tianshou's offline trainer: an evaluation and a checkpoint every epoch, TensorBoard curves,
    #    and a summary line at the end (or only the evaluation, with --watch). With --num-seeds S, S
    #    seeds train as one batched update, each writing the run folder its single run would.
    if config.run.num_seeds > 1:
        from offline_rl.runs.seed_runs import train_offline_seeds  # heavy (torch, Tianshou): loaded only when used

        return train_offline_seeds(
            build, buffer, make_env, config.run, reporter, saved_for=saved_for, checkpoint=session.checkpoint,
            device=session.device, **common,
        )  # fmt: skip
    algorithm = build()
    session.restore(algorithm, task=task)
    report = lambda writer: reporter(algorithm, writer)  # noqa: E731
    saved, checkpoint = saved_for(config.run), session.checkpoint

    def offline() -> dict[str, Any]:  # the offline run, or the summary of the finished one resumed
        return session.finished or evaluate_or_train(
            algorithm, buffer, make_env, config.run, report, saved=saved, checkpoint=checkpoint, **common
        )

    if not fine_tunes:
        return offline()
    # 5. Fine-tuning online (--online-steps) in the same run folder, from where the offline updates ended.
    return fine_tune(
        algorithm, buffer, make_env, config.run, finetune, report, offline_summary=offline, checkpoint=checkpoint,
        task=task, saved=saved,
    )  # fmt: skip


if __name__ == "__main__":
    run_main(main)
