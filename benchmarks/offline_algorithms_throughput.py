"""Gradient updates per second of offline_rl's TD3+BC, IQL, ReBRAC and BC, and Tianshou 2.0.1's
`TD3BC`, in one process.

    python benchmarks/offline_algorithms_throughput.py [--device cpu|cuda] [--updates 200] [--rounds 3]

The synthetic dataset of `cql_sac_throughput.py` (obs 17, act 6, 100k transitions) and each
algorithm at its CORL defaults (TD3+BC and Tianshou's TD3BC: 2×256 networks, batch 256, the actor every
second update; IQL: 2×256, batch 256; ReBRAC: 3×256 with layer-normalised critics, batch 1024; BC:
2×256, batch 256), driven through `update(buffer, batch_size)` as Tianshou's offline trainer drives
them. On CUDA ours runs captured and compiled (the programs' default). Rounds alternate between the
implementations so that machine noise hits all alike; the figure is the median over rounds. The last
line is `td3_bc_ratio_vs_tianshou: X.XX`.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from cql_sac_throughput import spaces, synthetic_buffer
from tianshou.algorithm import TD3BC as TianshouTD3BC
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousCritic
from timing import updates_per_second

from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig
from offline_rl.core.resources import tune_cpu_allocator


def build_tianshou_td3_bc(device: str) -> TianshouTD3BC:
    obs_space, act_space = spaces()
    obs_dim, act_dim = obs_space.shape[0], act_space.shape[0]
    actor = ContinuousActorDeterministic(
        preprocess_net=Net(state_shape=(obs_dim,), hidden_sizes=[256, 256]), action_shape=(act_dim,), max_action=1.0
    )
    critics = [
        ContinuousCritic(
            preprocess_net=Net(state_shape=(obs_dim,), action_shape=(act_dim,), hidden_sizes=[256, 256], concat=True)
        )
        for _ in range(2)
    ]
    policy = ContinuousDeterministicPolicy(actor=actor, action_space=act_space)
    return TianshouTD3BC(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=3e-4),
        critic=critics[0],
        critic_optim=AdamOptimizerFactory(lr=3e-4),
        critic2=critics[1],
        critic2_optim=AdamOptimizerFactory(lr=3e-4),
    ).to(device)


def columns(device: str) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each column: (a builder of the algorithm on `device`, its batch size)."""
    obs_space, act_space = spaces()
    return {
        "offline_rl TD3+BC": (lambda: TD3BC.build(obs_space, act_space, TD3BCConfig(), device=device), 256),
        "Tianshou TD3BC": (lambda: build_tianshou_td3_bc(device), 256),
        "offline_rl IQL": (lambda: IQL.build(obs_space, act_space, IQLConfig(), device=device), 256),
        "offline_rl ReBRAC": (lambda: ReBRAC.build(obs_space, act_space, ReBRACConfig(), device=device), 1024),
        "offline_rl BC": (lambda: BC.build(obs_space, act_space, BCConfig(), device=device), 256),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    torch.manual_seed(0)
    buffer = synthetic_buffer()
    built = {name: (build(), batch) for name, (build, batch) in columns(args.device).items()}
    for algorithm, _ in built.values():
        if hasattr(algorithm, "statistics_interval"):
            algorithm.statistics_interval = 100
    rates: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, (algorithm, batch) in built.items():
            rates[name].append(updates_per_second(algorithm, buffer, batch, args.updates, args.device))
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, {args.updates} updates x {args.rounds}")
    for name, values in rates.items():
        batch = built[name][1]
        each = ", ".join(f"{value:.1f}" for value in values)
        print(f"{name:20s} batch {batch:4d}: {statistics.median(values):8.1f} updates/s  ({each})")
    ratio = statistics.median(rates["offline_rl TD3+BC"]) / statistics.median(rates["Tianshou TD3BC"])
    print(f"td3_bc_ratio_vs_tianshou: {ratio:.2f}")


if __name__ == "__main__":
    main()
