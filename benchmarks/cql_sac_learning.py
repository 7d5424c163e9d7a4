"""Does it learn? offline_rl's CQL-SAC vs Tianshou 2.0.1's `CQL` on the same local dataset and budget.

    python benchmarks/cql_sac_learning.py [--task Hopper-v4] [--dataset-size 100000] [--epochs 5]
                                          [--updates-per-epoch 2000] [--test-num 5] [--seed 0]

The dataset is generated locally with `offline_rl.collect` (D4RL's random recipe; cached). Both
algorithms get the same buffer, the same networks (actor 2×256, two critics 2×256), N = 10, CQL
weight 10, automatic entropy tuning, no Lagrange, no Cal-QL, batch 256, the same number of
updates, and are evaluated on the same seeds after every epoch. The table reports the behaviour
data's mean episode return and each algorithm's evaluation return and D4RL normalised score.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import time

import numpy as np
import torch
from baselines import tianshou_cql
from tianshou.algorithm import CQL
from tianshou.algorithm.modelfree.sac import AutoAlpha
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector
from tianshou.env import DummyVectorEnv
from tianshou.trainer import OfflineTrainerParams

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.core.resources import tune_cpu_allocator
from offline_rl.data import dataset_stats, load_d4rl
from offline_rl.envs.make import make_env
from offline_rl.envs.scores import normalized_score, reference_scores
from offline_rl.runs.default_dataset import ensure_random_dataset
from offline_rl.runs.evaluation import EvaluationReporter


def tianshou(env, device: str) -> CQL:
    act_dim = env.action_space.shape[0]
    alpha = AutoAlpha(-float(act_dim), 0.0, AdamOptimizerFactory(lr=1e-4))
    return tianshou_cql(env.observation_space, env.action_space, alpha=alpha, cql_weight=10.0, device=device)


def ours(env, device: str) -> CQLSAC:
    config = CQLSACConfig(
        actor_hidden_sizes=[256, 256],
        critic_layers=2,
        cql_weight=10.0,
        cql_n_actions=10,
        actor_lr=1e-4,
        critic_lr=3e-4,
        alpha=1.0,
        auto_alpha=True,
        alpha_lr=1e-4,
        with_lagrange=False,
    )
    return CQLSAC.build(env.observation_space, env.action_space, config, device=device)


def train(name: str, algorithm, buffer, args, ref) -> dict:
    torch.manual_seed(args.seed)
    envs = DummyVectorEnv([lambda: make_env(args.task) for _ in range(args.test_num)])
    envs.seed([args.seed + 10_000 + i for i in range(args.test_num)])
    reporter = EvaluationReporter(*ref)
    start = time.time()
    algorithm.run_training(
        OfflineTrainerParams(
            buffer=buffer,
            test_collector=Collector(algorithm.policy, envs),
            max_epochs=args.epochs,
            epoch_num_steps=args.updates_per_epoch,
            test_step_num_episodes=args.test_num,
            batch_size=256,
            compute_score_fn=reporter,
            show_progress=False,
        )
    )
    elapsed = time.time() - start
    last = reporter.history[-1]
    print(
        f"{name}: {args.epochs * args.updates_per_epoch} updates in {elapsed:.0f} s; "
        f"per-epoch returns: {[round(r['return_mean'], 1) for r in reporter.history]}"
    )
    return {
        "name": name,
        "last": last,
        "best": max(reporter.history, key=lambda r: r["return_mean"]),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Hopper-v4")
    parser.add_argument("--dataset-size", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--updates-per-epoch", type=int, default=2000)
    parser.add_argument("--test-num", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    path = ensure_random_dataset(args.task, args.dataset_size, seed=0)
    buffer = load_d4rl(path)
    stats = dataset_stats(buffer)
    scores = reference_scores(args.task)
    ref = (scores[0], scores[1]) if scores else (None, None)
    env = make_env(args.task)
    results = []
    for name, factory in (("offline_rl CQL-SAC", ours), ("tianshou CQL", tianshou)):
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        results.append(train(name, factory(env, args.device), buffer, args, ref))

    def norm(value: float) -> str:
        return f"{normalized_score(value, *ref):.1f}" if ref[0] is not None else "n/a"

    print(
        f"\n{args.task}, random-policy dataset of {stats.transitions} transitions, "
        f"{args.epochs}×{args.updates_per_epoch} updates, {args.test_num} evaluation episodes, seed {args.seed}"
    )
    header = ("who", "return (last)", "norm. (last)", "best (optimistic)", "seconds")
    print(f"| {header[0]:22s} | {header[1]:>16s} | {header[2]:>12s} | {header[3]:>17s} | {header[4]:>7s} |")
    behaviour = f"{stats.return_mean:16.1f} | {norm(stats.return_mean):>12s}"
    print(f"| {'behaviour data':22s} | {behaviour} | {'':>17s} | {'':>7s} |")
    for r in results:
        last, best = r["last"], r["best"]
        print(
            f"| {r['name']:22s} | {last['return_mean']:8.1f} ± {last['return_std']:5.1f} | "
            f"{norm(last['return_mean']):>12s} | {best['return_mean']:17.1f} | {r['seconds']:7.0f} |"
        )


if __name__ == "__main__":
    main()
