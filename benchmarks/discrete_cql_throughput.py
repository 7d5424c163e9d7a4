"""Updates per second and memory: offline_rl's discrete CQL against Tianshou 2.0.1's `DiscreteCQL`.

    python benchmarks/discrete_cql_throughput.py [--transitions 50000] [--updates 40] [--rounds 3]
        [--paths eager,eager-blas,captured,compiled,host-fed[+sorted|+pairwise]] [--network nature-cnn|mlp]
        [--matmul-precision highest|high|medium] [--cnn nature|dopamine]

Same synthetic frame-stacked data for both (84×84 uint8 frames, stacks of 4, 6 actions, episodes of
1000 steps): Tianshou's in its own Atari buffer (`ReplayBuffer(stack_num=4, ignore_obs_next=True,
save_only_last_obs=True)`, stacks rebuilt at every sample), ours in `FrameStackBuffer`. The same
Nature CNN architecture with 200 quantiles — Tianshou's as its Atari examples build it, ours
(channels-last) — batch 32, n-step 1, min-Q weight 10. Rounds alternate; the
figure is the median. Also printed: sampling alone (a batch of 32 stacked obs + obs_next) and the
bytes per transition each buffer holds, and the arithmetic of one update (GFLOP of its matrix products
and convolutions, counted by torch on an eager update of each). On CPU ours runs eager twice by
default: with its layers' products in oneDNN (`eager`) and in torch's BLAS (`eager-blas`, what
`--cpu-products blas` selects). The last line is `ratio_vs_tianshou: X.XX`.

A path with `+sorted` or `+pairwise` appended computes the quantile-Huber loss in that form
(`offline_rl/algorithms/discrete_cql/quantile_loss.py`) instead of the device's default (sorted on CPU,
pairwise on GPUs), e.g. `--paths captured,captured+sorted` on a GPU.

`--cnn dopamine` builds our network as Dopamine builds it (the CQL authors' Atari presets: 'same'
padding, 7744 features into the 512-unit layer instead of 3136); Tianshou's stays its own Nature CNN,
so its column is then the machine's yardstick rather than the same arithmetic.

`--network mlp` times the vector-task configuration instead (Tianshou's own CartPole QR-DQN and
discrete CQL tests, `configs/discrete_cql/CartPole-v1.yaml`): 4-dimensional observations, 2 actions,
one hidden layer of 64, 200 quantiles, 3-step returns, batch 32, both algorithms reading the same
Tianshou `ReplayBuffer` (episodes of 200 steps). There the quantile-Huber loss is most of an update.

When `d3rlpy` is installed (it is not a dependency, and pins an older gymnasium: `d3rlpy_baseline.py`),
d3rlpy's `DiscreteCQL` on a quantile head is a third column, reading the same frames through its own
`FrameStackTransitionPicker`: `--d3rlpy eager,compiled` (default: eager on CPU, both on CUDA;
`--d3rlpy none` leaves it out), then `ratio_vs_d3rlpy: X.XX`.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import torch
from baselines import TianshouAtariQRDQNNet
from d3rlpy_baseline import D3rlpyColumn, d3rlpy_discrete_cql, d3rlpy_version
from d3rlpy_baseline import modes_from as d3rlpy_modes_from
from tianshou.algorithm import DiscreteCQL as TianshouDiscreteCQL
from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Batch, ReplayBuffer
from tianshou.utils.net.common import Net
from timing import cpu_products_line, matrix_gflop_per_update, products_of, refuse_cuda_only_paths, updates_per_second

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql import algorithm as discrete_algorithm
from offline_rl.algorithms.discrete_cql.config import CNN_VARIANTS
from offline_rl.algorithms.discrete_cql.quantile_loss import pairwise_quantile_huber_loss, sorted_quantile_huber_loss
from offline_rl.core.arithmetic import TORCH_MATMUL_PRECISIONS
from offline_rl.core.resources import tune_cpu_allocator
from offline_rl.data.frame_stack import FrameStackBuffer
from offline_rl.data.transitions import make_replay_buffer

STACK, ACTIONS, QUANTILES, BATCH, EPISODE = 4, 6, 200, 32, 1000
VECTOR_OBS, VECTOR_ACTIONS, VECTOR_HIDDEN, VECTOR_EPISODE = 4, 2, [64], 200
LEARNING_SETTINGS = {"nature-cnn": (1e-4, 1), "mlp": (3e-3, 3)}  # learning rate, n-step horizon


def synthetic_buffers(transitions: int, seed: int = 0) -> tuple[ReplayBuffer, FrameStackBuffer]:
    rng = np.random.default_rng(seed)
    episodes = max(1, transitions // EPISODE)
    frames_per_episode = EPISODE + 1
    frames = rng.integers(0, 256, size=(episodes * frames_per_episode, 84, 84), dtype=np.uint8)
    act = rng.integers(0, ACTIONS, size=episodes * EPISODE)
    rew = rng.choice([-1.0, 0.0, 1.0], size=episodes * EPISODE).astype(np.float32)
    terminated = np.zeros(episodes * EPISODE, bool)
    terminated[EPISODE - 1 :: EPISODE] = True
    step = np.arange(episodes * EPISODE)
    frame_index = step // EPISODE * frames_per_episode + step % EPISODE
    first = step // EPISODE * frames_per_episode
    ours = FrameStackBuffer(frames, frame_index, first, act, rew, terminated, np.zeros_like(terminated), STACK)
    theirs = ReplayBuffer(len(act), stack_num=STACK, ignore_obs_next=True, save_only_last_obs=True)
    for t in range(len(act)):  # Tianshou stores the newest frame of each obs
        theirs.add(
            Batch(
                obs=frames[frame_index[t]][None].repeat(STACK, 0),
                act=act[t],
                rew=rew[t],
                terminated=terminated[t],
                truncated=False,
                obs_next=frames[frame_index[t] + 1][None],
                info={},
            )
        )
    return theirs, ours


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return gym.spaces.Box(0, 255, (STACK, 84, 84), np.uint8), gym.spaces.Discrete(ACTIONS)


def vector_buffer(transitions: int, seed: int = 0) -> ReplayBuffer:
    """CartPole-shaped transitions in one Tianshou buffer, which both implementations read."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(transitions, VECTOR_OBS)).astype(np.float32)
    terminated = np.zeros(transitions, bool)
    terminated[VECTOR_EPISODE - 1 :: VECTOR_EPISODE] = True
    return make_replay_buffer(
        obs=obs,
        act=rng.integers(0, VECTOR_ACTIONS, transitions),
        rew=np.ones(transitions, np.float32),
        terminated=terminated,
        truncated=np.zeros(transitions, bool),
        obs_next=np.roll(obs, -1, axis=0),
    )


def vector_spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return gym.spaces.Box(-np.inf, np.inf, (VECTOR_OBS,), np.float32), gym.spaces.Discrete(VECTOR_ACTIONS)


def build_tianshou(device: str, network: str = "nature-cnn") -> TianshouDiscreteCQL:
    """The Nature CNN as Tianshou's Atari examples build it, or the MLP of its
    `test/offline/test_discrete_cql.py`; the same settings as `build_ours`."""
    if network == "mlp":
        obs_space, act_space = vector_spaces()
        model: torch.nn.Module = Net(
            state_shape=(VECTOR_OBS,),
            action_shape=(VECTOR_ACTIONS,),
            hidden_sizes=VECTOR_HIDDEN,
            softmax=False,
            num_atoms=QUANTILES,
        )
    else:
        obs_space, act_space = spaces()
        model = TianshouAtariQRDQNNet(obs_space.shape, ACTIONS, QUANTILES)
    lr, n_step = LEARNING_SETTINGS[network]
    policy = QRDQNPolicy(model=model.to(device), action_space=act_space, observation_space=obs_space)
    return TianshouDiscreteCQL(
        policy=policy,
        optim=AdamOptimizerFactory(lr=lr),
        min_q_weight=10.0,
        num_quantiles=QUANTILES,
        n_step_return_horizon=n_step,
        target_update_freq=500,
    ).to(device)


def build_ours(device: str, path: str, network: str = "nature-cnn", cnn: str = "nature") -> CQLQRDQN:
    """`path`: eager (eager-blas: with torch's BLAS on CPU), captured (one CUDA graph per update),
    compiled (torch.compile, then captured), or host-fed (captured, with the dataset kept in host
    memory and each batch copied one update ahead, as when it does not fit in GPU memory)."""
    obs_space, act_space = vector_spaces() if network == "mlp" else spaces()
    lr, n_step = LEARNING_SETTINGS[network]
    config = DiscreteCQLConfig(
        num_quantiles=QUANTILES,
        cql_weight=10.0,
        lr=lr,
        target_update_freq=500,
        hidden_sizes=VECTOR_HIDDEN,  # the MLP's; the Nature CNN has its own layers
        n_step=n_step,
        cnn=cnn,
    )
    algorithm = CQLQRDQN.build(obs_space, act_space, config, device=device)
    algorithm.capture = path not in ("eager", "eager-blas")
    algorithm.compile_update = path == "compiled"
    algorithm.dataset_on_device = False if path == "host-fed" else None
    algorithm.statistics_interval = 100  # the examples' --log-interval default
    return algorithm


def build_d3rlpy(device: str, mode: str, network: str = "nature-cnn") -> D3rlpyColumn:
    """d3rlpy's DiscreteCQL with `build_ours`' settings (its returns are one-step: with the MLP's
    3-step setting it does less than the other two)."""
    lr, _ = LEARNING_SETTINGS[network]
    return d3rlpy_discrete_cql(
        num_quantiles=QUANTILES,
        cql_weight=10.0,
        lr=lr,
        target_update_interval=500,
        batch_size=BATCH,
        device=device,
        mode=mode,
        hidden_sizes=tuple(VECTOR_HIDDEN) if network == "mlp" else None,
    )


LOSS_FORMS = {"sorted": sorted_quantile_huber_loss, "pairwise": pairwise_quantile_huber_loss}


@contextlib.contextmanager
def loss_form(form: str) -> Iterator[None]:
    """The quantile-Huber loss in `form` (a `LOSS_FORMS` key; '' keeps the device's default) for the
    updates inside (the algorithm module looks the loss up by name at each eager update, and a CUDA
    graph records the form in force when it is captured, at the path's first update)."""
    if not form:
        yield
        return
    default = discrete_algorithm.quantile_huber_loss
    discrete_algorithm.quantile_huber_loss = LOSS_FORMS[form]
    try:
        yield
    finally:
        discrete_algorithm.quantile_huber_loss = default


def sampling_ms(buffer, repeats: int = 50) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        batch, _ = buffer.sample(BATCH)
        _ = batch.obs, batch.obs_next
    return (time.perf_counter() - start) / repeats * 1e3


def tianshou_bytes(buffer: ReplayBuffer) -> int:
    meta = buffer._meta
    return int(sum(np.asarray(meta[key]).nbytes for key in meta.get_keys()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--paths",
        default=None,
        help="ours: eager, eager-blas, captured, compiled and/or host-fed, comma-separated (default: eager and "
        "eager-blas on CPU, eager on CUDA)",
    )
    parser.add_argument(
        "--matmul-precision",
        default="highest",
        choices=TORCH_MATMUL_PRECISIONS,
        help="torch.set_float32_matmul_precision, applied to both implementations alike (high: TF32 on GPUs)",
    )
    parser.add_argument(
        "--network",
        choices=["nature-cnn", "mlp"],
        default="nature-cnn",
        help="nature-cnn: Atari frames (default); mlp: the CartPole configuration",
    )
    parser.add_argument(
        "--cnn",
        choices=CNN_VARIANTS,
        default="nature",
        help="our network on frames: nature (Tianshou's build, default) or dopamine (the CQL authors' presets)",
    )
    parser.add_argument(
        "--d3rlpy",
        default=None,
        help="comma-separated d3rlpy modes: eager, compiled (CUDA only), or none (default: eager on CPU, both on "
        "CUDA; only when d3rlpy is installed)",
    )
    args = parser.parse_args()
    paths = (args.paths or ("eager" if args.device == "cuda" else "eager,eager-blas")).split(",")
    refuse_cuda_only_paths(parser, paths, args.device)
    d3rlpy_modes = d3rlpy_modes_from(args.d3rlpy, args.device)
    parts = {path: path.partition("+")[::2] for path in paths}  # 'captured+sorted': ('captured', 'sorted')
    for path, (_, form) in parts.items():
        if form not in ("", *LOSS_FORMS):
            parser.error(f"--paths: {path!r}: the loss form after '+' must be one of {', '.join(LOSS_FORMS)}")
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    tune_cpu_allocator()
    torch.manual_seed(0)
    if args.network == "mlp":
        theirs_buffer = ours_buffer = vector_buffer(args.transitions)
    else:
        theirs_buffer, ours_buffer = synthetic_buffers(args.transitions)
    theirs = build_tianshou(args.device, args.network)
    ours = {path: build_ours(args.device, base, args.network, args.cnn) for path, (base, _) in parts.items()}
    d3rlpy_runs = {mode: build_d3rlpy(args.device, mode, args.network) for mode in d3rlpy_modes}
    for algorithm in d3rlpy_runs.values():
        algorithm.process_buffer(ours_buffer)
    theirs_rates: list[float] = []
    ours_rates: dict[str, list[float]] = {path: [] for path in paths}
    d3rlpy_rates: dict[str, list[float]] = {mode: [] for mode in d3rlpy_modes}
    for _ in range(args.rounds):
        theirs_rates.append(updates_per_second(theirs, theirs_buffer, BATCH, args.updates, args.device))
        for mode, algorithm in d3rlpy_runs.items():
            d3rlpy_rates[mode].append(
                updates_per_second(algorithm, ours_buffer, BATCH, args.updates, args.device, algorithm.warmup_updates)
            )
        for path, algorithm in ours.items():
            base, form = parts[path]
            with loss_form(form):
                rate = updates_per_second(
                    algorithm, ours_buffer, BATCH, args.updates, args.device, cpu_products=products_of(base)
                )
            ours_rates[path].append(rate)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({args.threads} threads)"
    print(
        f"device: {device_name}, torch {torch.__version__}, {args.network}"
        + (f" (ours: --cnn {args.cnn})" if args.network == "nature-cnn" else "")
        + f", {len(ours_buffer)} transitions, "
        f"float32 matmul precision {args.matmul_precision}" + (f", {d3rlpy_version()}" if d3rlpy_runs else "")
    )
    if args.device == "cpu":
        print(cpu_products_line())
    if args.network == "nature-cnn":  # the two frame-stack buffers; the MLP's is one and the same
        sampling_theirs = statistics.median(sampling_ms(theirs_buffer, 200) for _ in range(3))
        sampling_ours = statistics.median(sampling_ms(ours_buffer, 200) for _ in range(3))
        print(
            f"sampling 32 stacked obs + obs_next: tianshou {sampling_theirs:.3f} ms, offline_rl "
            f"{sampling_ours:.3f} ms (median of 3 × 200; ratio {sampling_theirs / sampling_ours:.2f})"
        )
        print(
            f"bytes per transition: tianshou {tianshou_bytes(theirs_buffer) / len(theirs_buffer):.0f}, "
            f"offline_rl {ours_buffer.nbytes / len(ours_buffer):.0f}"
        )
    theirs_rate = statistics.median(theirs_rates)
    print(
        f"tianshou DiscreteCQL:   {theirs_rate:6.2f} updates/s  (rounds: {', '.join(f'{r:.2f}' for r in theirs_rates)})"
    )
    for mode, rates in d3rlpy_rates.items():
        rounds = ", ".join(f"{r:.2f}" for r in rates)
        print(f"d3rlpy DiscreteCQL, {mode}: {statistics.median(rates):7.2f} updates/s  (rounds: {rounds})")
    for path, rates in ours_rates.items():
        rounds = ", ".join(f"{r:.2f}" for r in rates)
        print(f"offline_rl CQLQRDQN, {path}: {statistics.median(rates):7.2f} updates/s  (rounds: {rounds})")
    ours_rate = max(statistics.median(rates) for rates in ours_rates.values())
    ours_gflop = matrix_gflop_per_update(build_ours(args.device, "eager", args.network, args.cnn), ours_buffer, BATCH)
    theirs_gflop = matrix_gflop_per_update(theirs, theirs_buffer, BATCH)
    d3rlpy_gflop = ""
    if d3rlpy_runs:
        counted = build_d3rlpy(args.device, "eager", args.network)
        counted.process_buffer(ours_buffer)
        d3rlpy_gflop = f"d3rlpy {matrix_gflop_per_update(counted, ours_buffer, BATCH):.2f} GFLOP, "
    print(
        f"matrix products per update (torch.utils.flop_counter): tianshou {theirs_gflop:.2f} GFLOP, {d3rlpy_gflop}"
        f"offline_rl {ours_gflop:.2f} GFLOP; offline_rl's fastest path: {ours_rate * ours_gflop / 1e3:.2f} TFLOP/s"
    )
    if d3rlpy_rates:
        print(f"ratio_vs_d3rlpy: {ours_rate / max(statistics.median(rates) for rates in d3rlpy_rates.values()):.2f}")
    print(f"ratio_vs_tianshou: {ours_rate / theirs_rate:.2f}")


if __name__ == "__main__":
    main()
