"""Gradient updates per second of offline_rl's TD3+BC, IQL, ReBRAC and BC, and Tianshou 2.0.1's
`TD3BC`, in one process.

    python benchmarks/offline_algorithms_throughput.py [--device cpu|cuda] [--updates 200] [--rounds 3]

The synthetic dataset of `cql_sac_throughput.py` (obs 17, act 6, 100k transitions) and each
algorithm at its CORL defaults (TD3+BC and Tianshou's TD3BC: 2×256 networks, batch 256, the actor every
second update; IQL: 2×256, batch 256; ReBRAC: 3×256 with layer-normalised critics, batch 1024; BC:
2×256, batch 256), driven through `update(buffer, batch_size)` as Tianshou's offline trainer drives
them. On CUDA ours runs captured and compiled (the programs' default). Rounds alternate between the
implementations so that machine noise hits all alike; the figure is the median over rounds. The last
lines are `td3_bc_ratio_vs_tianshou: X.XX` and, where `torchrl` is installed (it is not a dependency;
`torchrl_td3bc_iql.py` says how its columns follow TorchRL's reference scripts), `td3_bc_ratio_vs_torchrl`
and `iql_ratio_vs_torchrl` against TorchRL's fastest mode.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from cql_sac_throughput import spaces, synthetic_buffer
from peer_column import requested_modes
from tianshou.algorithm import TD3BC as TianshouTD3BC
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousCritic
from timing import updates_per_second
from torchrl_baseline import MODES

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


def columns(device: str, torchrl_modes: list[str]) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each column: (a builder of the algorithm on `device`, its batch size)."""
    obs_space, act_space = spaces()
    dims = (obs_space.shape[0], act_space.shape[0])
    torchrl_td3_bc, torchrl_iql = {}, {}
    if torchrl_modes:
        from torchrl_td3bc_iql import TorchRLIQL, TorchRLTD3BC

        for mode in torchrl_modes:
            torchrl_td3_bc[f"TorchRL TD3BCLoss {mode}"] = (partial(TorchRLTD3BC, *dims, device=device, mode=mode), 256)
            torchrl_iql[f"TorchRL IQLLoss {mode}"] = (partial(TorchRLIQL, *dims, device=device, mode=mode), 256)
    return {
        "offline_rl TD3+BC": (lambda: TD3BC.build(obs_space, act_space, TD3BCConfig(), device=device), 256),
        "Tianshou TD3BC": (lambda: build_tianshou_td3_bc(device), 256),
        **torchrl_td3_bc,
        "offline_rl IQL": (lambda: IQL.build(obs_space, act_space, IQLConfig(), device=device), 256),
        **torchrl_iql,
        "offline_rl ReBRAC": (lambda: ReBRAC.build(obs_space, act_space, ReBRACConfig(), device=device), 1024),
        "offline_rl BC": (lambda: BC.build(obs_space, act_space, BCConfig(), device=device), 256),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    parser.add_argument(
        "--torchrl", default=None, help="TorchRL's modes to time: eager,compiled,cudagraph (default: eager on CPU, "
        "all three on CUDA, where torchrl is installed; none: leave it out)",
    )  # fmt: skip
    args = parser.parse_args()
    torchrl_modes = requested_modes(
        args.torchrl, module="torchrl", option="--torchrl", modes=MODES, cuda_only=("cudagraph",),
        default=",".join(MODES) if args.device == "cuda" else "eager", device=args.device,
    )  # fmt: skip
    if args.threads:
        torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    torch.manual_seed(0)
    buffer = synthetic_buffer()
    built = {name: (build(), batch) for name, (build, batch) in columns(args.device, torchrl_modes).items()}
    for algorithm, _ in built.values():
        if hasattr(algorithm, "statistics_interval"):
            algorithm.statistics_interval = 100
    for algorithm, _ in built.values():
        algorithm.process_buffer(buffer)  # a peer copies the data into its own buffer; ours stage it
    rates: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, (algorithm, batch) in built.items():
            warmup = getattr(algorithm, "warmup_updates", 5)
            rates[name].append(updates_per_second(algorithm, buffer, batch, args.updates, args.device, warmup))
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, {args.updates} updates x {args.rounds}")
    for name, values in rates.items():
        batch = built[name][1]
        each = ", ".join(f"{value:.1f}" for value in values)
        print(f"{name:20s} batch {batch:4d}: {statistics.median(values):8.1f} updates/s  ({each})")
    ours = {"td3_bc": statistics.median(rates["offline_rl TD3+BC"]), "iql": statistics.median(rates["offline_rl IQL"])}
    print(f"td3_bc_ratio_vs_tianshou: {ours['td3_bc'] / statistics.median(rates['Tianshou TD3BC']):.2f}")
    for key, prefix in (("td3_bc", "TorchRL TD3BCLoss"), ("iql", "TorchRL IQLLoss")):
        theirs = [statistics.median(values) for name, values in rates.items() if name.startswith(prefix)]
        if theirs:
            print(f"{key}_ratio_vs_torchrl: {ours[key] / max(theirs):.2f}")


if __name__ == "__main__":
    main()
