"""Gradient updates per second: offline_rl's CQL-SAC against Tianshou 2.0.1's `CQL`, in one process.

    python benchmarks/cql_sac_throughput.py [--device cpu|cuda] [--updates 60] [--rounds 3]
        [--paths eager,eager-blas,captured,compiled] [--critic-layers 2]

Same synthetic dataset for both (obs 17, act 6, 100k transitions), batch 256, two critics of 2×256,
actor 2×256, N = 10 sampled actions per group, fixed α = 0.2, Lagrange off, Cal-QL off. Both are
driven through their `update(buffer, batch_size)` entry point, as Tianshou's offline trainer does.
Rounds alternate between the two implementations so that machine noise hits both alike; the
figure is the median over rounds. Ours reads its statistics once per 100 updates (the examples'
--log-interval default); on CUDA it runs the eager path, the captured one (one CUDA graph per
update) and the compiled one (the losses and the optimiser steps fused by torch.compile, then
captured: the examples' default on CUDA) unless `--paths` says otherwise; `compiled-losses`
compiles the losses only (the optimisers keep torch's fused Adam kernel). On CPU it runs the eager
path twice: with the networks' products in oneDNN (`eager`, the default) and in torch's BLAS
(`eager-blas`, what `--cpu-products blas` selects). `--critic-layers 3` is
the examples' default network (given to every implementation). Then the arithmetic of one update
(the GFLOP of its matrix products, counted by torch on an eager update of each implementation) and
the TFLOP/s our fastest path reaches with it. The last line is `ratio_vs_tianshou: X.XX` (the
fastest path).

When `torchrl` is installed (it is not a dependency), TorchRL's `CQLLoss` is a third column, set up
as its offline CQL reference implementation sets it up (`torchrl_baseline.py` says how and where it
departs): `--torchrl eager,compiled,cudagraph` picks its modes (default: eager on CPU, all three on
CUDA; `--torchrl none` leaves it out), and `ratio_vs_torchrl: X.XX` compares the fastest of each.
Likewise d3rlpy's `CQL` when `d3rlpy` is installed (`d3rlpy_baseline.py`; it pins an older gymnasium,
so it gets a virtual environment of its own): `--d3rlpy eager,compiled` (default: eager on CPU, both
on CUDA; `--d3rlpy none` leaves it out), then `ratio_vs_d3rlpy: X.XX`. And TF-Agents' `CqlSacAgent` on
the CPU when `tf_agents` is installed (`tf_agents_baseline.py`, also a venv of its own; `--tf-agents
none` leaves it out), then `ratio_vs_tf_agents: X.XX`.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import statistics

import gymnasium as gym
import numpy as np
import torch
from baselines import tianshou_cql
from d3rlpy_baseline import D3rlpyColumn, d3rlpy_cql, d3rlpy_version
from d3rlpy_baseline import modes_from as d3rlpy_modes_from
from peer_column import CQLSetup, PeerColumn, requested_modes
from tf_agents_baseline import TFAgentsCQL, tf_agents_version
from tf_agents_baseline import modes_from as tf_agents_modes_from
from tianshou.algorithm import CQL
from tianshou.data import Batch, ReplayBuffer
from timing import cpu_products_line, matrix_gflop_per_update, products_of, refuse_cuda_only_paths, updates_per_second
from torchrl_baseline import MODES as TORCHRL_MODES
from torchrl_baseline import TorchRLCQL, torchrl_version

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.core.arithmetic import TORCH_MATMUL_PRECISIONS
from offline_rl.core.resources import tune_cpu_allocator
from offline_rl.data.transitions import make_replay_buffer

OBS_DIM, ACT_DIM, SIZE, BATCH, N_ACTIONS = 17, 6, 100_000, 256, 10
ALPHA, CQL_WEIGHT = 0.2, 1.0  # every implementation's: α fixed, the conservative term's weight


def synthetic_buffer(seed: int = 0) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(SIZE, OBS_DIM)).astype(np.float32)
    terminated = rng.random(SIZE) < 0.001
    truncated = (np.arange(SIZE) % 1000) == 999
    return make_replay_buffer(
        obs=obs,
        act=rng.uniform(-1, 1, size=(SIZE, ACT_DIM)).astype(np.float32),
        rew=rng.normal(size=SIZE).astype(np.float32),
        terminated=terminated,
        truncated=truncated & ~terminated,
        obs_next=np.roll(obs, -1, axis=0),
    )


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    return (
        gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
        gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32),
    )


def build_ours(device: str, path: str = "eager", critic_layers: int = 2) -> CQLSAC:
    obs_space, act_space = spaces()
    config = CQLSACConfig(
        actor_hidden_sizes=[256] * critic_layers,
        critic_layers=critic_layers,
        cql_n_actions=N_ACTIONS,
        alpha=ALPHA,
        auto_alpha=False,
        with_lagrange=False,
        cql_weight=CQL_WEIGHT,
    )
    algorithm = CQLSAC.build(obs_space, act_space, config, device=device)
    algorithm.capture = path in ("captured", "compiled", "compiled-losses")
    algorithm.compile_update = path in ("compiled", "compiled-losses")
    algorithm.compile_optimizer_steps = path == "compiled"
    algorithm.statistics_interval = 100
    return algorithm


def build_tianshou(device: str, hidden_layers: int = 2) -> CQL:
    obs_space, act_space = spaces()
    return tianshou_cql(
        obs_space,
        act_space,
        alpha=ALPHA,
        cql_weight=CQL_WEIGHT,
        num_repeat_actions=N_ACTIONS,
        hidden_layers=hidden_layers,
        device=device,
    )


def peer_setup(hidden_layers: int = 2, n_actions: int = N_ACTIONS) -> CQLSetup:
    """The configuration every other library's column is built with (ours and Tianshou's take the same
    constants through their own builders above)."""
    return CQLSetup(OBS_DIM, ACT_DIM, ALPHA, CQL_WEIGHT, n_actions, BATCH, (256,) * hidden_layers)


def build_torchrl(device: str, mode: str, hidden_layers: int = 2) -> TorchRLCQL:
    return TorchRLCQL(peer_setup(hidden_layers), device=device, mode=mode)


def build_d3rlpy(device: str, mode: str, hidden_layers: int = 2) -> D3rlpyColumn:
    return d3rlpy_cql(peer_setup(hidden_layers), device=device, mode=mode)


def build_tf_agents(threads: int, hidden_layers: int = 2, samples: int = N_ACTIONS) -> TFAgentsCQL:
    return TFAgentsCQL(peer_setup(hidden_layers, samples), threads=threads)


def print_rates(label: str, rates: list[float]) -> None:
    print(f"{label:32s}{statistics.median(rates):8.2f} updates/s  (rounds: {', '.join(f'{r:.2f}' for r in rates)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument(
        "--matmul-precision",
        default="highest",
        choices=TORCH_MATMUL_PRECISIONS,
        help="torch.set_float32_matmul_precision, applied to both implementations alike",
    )
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="skip offline_rl.core.resources.tune_cpu_allocator (applied to the whole process, so to both)",
    )
    parser.add_argument(
        "--paths",
        default=None,
        help="comma-separated: eager, eager-blas, captured, compiled, compiled-losses (default: eager, captured, "
        "compiled on CUDA; eager, eager-blas on CPU)",
    )
    parser.add_argument(
        "--critic-layers", type=int, default=2, help="hidden layers of every implementation's actor and critics"
    )
    parser.add_argument(
        "--torchrl",
        default=None,
        help="comma-separated TorchRL modes: eager, compiled, cudagraph, or none (default: eager on CPU, all on CUDA; "
        "only when torchrl is installed)",
    )
    parser.add_argument(
        "--d3rlpy",
        default=None,
        help="comma-separated d3rlpy modes: eager, compiled (CUDA only), or none (default: eager on CPU, both on "
        "CUDA; only when d3rlpy is installed)",
    )
    parser.add_argument(
        "--tf-agents",
        default=None,
        help="TF-Agents' CqlSacAgent as a tf.function ('function'), or none (default: function on CPU; only when "
        "tf_agents is installed)",
    )
    parser.add_argument(
        "--tf-agents-samples",
        type=int,
        default=N_ACTIONS,
        help=f"TF-Agents' num_cql_samples (default {N_ACTIONS}, as everyone's N; it scores 2N + 2 actions per state "
        "where the others score 3N + 1, so 15 is about the others' arithmetic at 10)",
    )
    args = parser.parse_args()
    paths = (args.paths or ("eager,captured,compiled" if args.device == "cuda" else "eager,eager-blas")).split(",")
    refuse_cuda_only_paths(parser, paths, args.device)
    torchrl_modes = torchrl_modes_from(args.torchrl, args.device)
    d3rlpy_modes = d3rlpy_modes_from(args.d3rlpy, args.device)
    tf_agents_modes = tf_agents_modes_from(args.tf_agents) if args.device == "cpu" else []
    allocator = "glibc defaults" if args.default_allocator else f"tuned={tune_cpu_allocator()}"
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    torch.manual_seed(0)
    buffer = synthetic_buffer()
    ours = {path: build_ours(args.device, path, args.critic_layers) for path in paths}
    theirs = build_tianshou(args.device, args.critic_layers)
    torchrl_runs = {mode: build_torchrl(args.device, mode, args.critic_layers) for mode in torchrl_modes}
    d3rlpy_runs = {mode: build_d3rlpy(args.device, mode, args.critic_layers) for mode in d3rlpy_modes}
    peers: dict[str, PeerColumn] = {
        **{f"torchrl CQLLoss, {mode}": run for mode, run in torchrl_runs.items()},
        **{f"d3rlpy CQL, {mode}": run for mode, run in d3rlpy_runs.items()},
        **{
            f"tf_agents CqlSacAgent, {mode}": build_tf_agents(args.threads, args.critic_layers, args.tf_agents_samples)
            for mode in tf_agents_modes
        },
    }
    for algorithm in [*ours.values(), theirs, *peers.values()]:
        algorithm.process_buffer(buffer)
    for label, algorithm in peers.items():
        warm_up_or_exit(algorithm, label)
    ours_rates: dict[str, list[float]] = {path: [] for path in paths}
    peer_rates: dict[str, list[float]] = {label: [] for label in peers}
    theirs_rates = []
    for _ in range(args.rounds):
        theirs_rates.append(updates_per_second(theirs, buffer, BATCH, args.updates, args.device))
        for label, algorithm in peers.items():
            peer_rates[label].append(
                updates_per_second(algorithm, buffer, BATCH, args.updates, args.device, algorithm.warmup_updates)
            )
        for path, algorithm in ours.items():
            ours_rates[path].append(
                updates_per_second(algorithm, buffer, BATCH, args.updates, args.device, cpu_products=products_of(path))
            )
    theirs_rate = statistics.median(theirs_rates)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({args.threads} threads)"
    print(
        f"device: {device_name}, torch {torch.__version__}, float32 matmul precision {args.matmul_precision}, "
        f"allocator {allocator}"
        + (f", {torchrl_version()}" if torchrl_runs else "")
        + (f", {d3rlpy_version()}" if d3rlpy_runs else "")
        + (f", {tf_agents_version()}" if tf_agents_modes else "")
    )
    if args.device == "cpu":
        print(cpu_products_line())
    print_rates("tianshou CQL:", theirs_rates)
    for label, rates in peer_rates.items():
        print_rates(f"{label}:", rates)
    for path, rates in ours_rates.items():
        print_rates(f"offline_rl CQL-SAC, {path}:", rates)
    best = max(statistics.median(rates) for rates in ours_rates.values())
    print_arithmetic(args, buffer, theirs, bool(torchrl_runs), bool(d3rlpy_runs), best)
    for peer in ("torchrl", "d3rlpy", "tf_agents"):
        rates_of_peer = [statistics.median(rates) for label, rates in peer_rates.items() if label.startswith(peer)]
        if rates_of_peer:
            print(f"ratio_vs_{peer}: {best / max(rates_of_peer):.2f}")
    print(f"ratio_vs_tianshou: {best / theirs_rate:.2f}")


def print_arithmetic(
    args: argparse.Namespace, buffer: ReplayBuffer, theirs: CQL, with_torchrl: bool, with_d3rlpy: bool, best: float
) -> None:
    """How much arithmetic each implementation asks for per update, and what our fastest path makes of
    the device with it."""
    counted = {"tianshou": theirs}
    if with_torchrl:
        counted["torchrl"] = build_torchrl(args.device, "eager", args.critic_layers)
    if with_d3rlpy:
        counted["d3rlpy"] = build_d3rlpy(args.device, "eager", args.critic_layers)
    counted["offline_rl"] = build_ours(args.device, "eager", args.critic_layers)
    gflop = {}
    for name, algorithm in counted.items():
        if name != "tianshou":
            algorithm.process_buffer(buffer)
        gflop[name] = matrix_gflop_per_update(algorithm, buffer, BATCH)
    print(
        "matrix products per update (torch.utils.flop_counter): "
        + ", ".join(f"{name} {value:.2f} GFLOP" for name, value in gflop.items())
        + f"; offline_rl's fastest path: {best * gflop['offline_rl'] / 1e3:.2f} TFLOP/s"
    )


def warm_up_or_exit(algorithm: PeerColumn, label: str) -> None:
    """Compile and capture a peer before anything is timed: a CUDA graph capture that fails leaves the
    process's CUDA generator unusable for every implementation after it, so it must fail first and alone."""
    try:
        for _ in range(algorithm.warmup_updates + 1):
            algorithm.update()
    except Exception as error:
        raise SystemExit(f"{label} failed before timing ({str(error).splitlines()[0]}); leave it out") from None


def torchrl_modes_from(flag: str | None, device: str) -> list[str]:
    """TorchRL's column runs only where it is installed: it is not a dependency."""
    default = "eager,compiled,cudagraph" if device == "cuda" else "eager"
    return requested_modes(
        flag,
        module="torchrl",
        option="--torchrl",
        modes=TORCHRL_MODES,
        default=default,
        cuda_only=("cudagraph",),
        device=device,
    )


if __name__ == "__main__":
    _ = Batch  # Tianshou's Batch is imported so both stacks are fully loaded before timing
    main()
