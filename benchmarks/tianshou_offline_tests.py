"""Tianshou 2.0.1's own offline tests, run with Tianshou's algorithms and with offline_rl's drop-ins.

    python benchmarks/tianshou_offline_tests.py [--scenario cql|td3_bc|discrete_cql|all] [--seeds 0 1 2]

Ports of `test/offline/test_cql.py` and `test/offline/test_td3_bc.py` (Pendulum-v1) and
`test/offline/test_discrete_cql.py` (CartPole-v1) with their data, budgets and thresholds. Each
scenario's expert data is gathered once, as `gather_pendulum_data.py` / `gather_cartpole_data.py`
gather it (a SAC or QR-DQN expert trained online, then 20000 collected steps), and cached. The
training code below is the same for both algorithms: only the class differs,
`tianshou.algorithm.CQL` or `offline_rl.CQL` (and likewise for `TD3BC` and `DiscreteCQL`), exactly the
import-line swap a Tianshou user makes. A seed passes when its best evaluation reaches the test's
threshold (-1200 on Pendulum, 170 on CartPole), as the tests assert.
"""

from __future__ import annotations

import offline_rl  # first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import pickle
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import tianshou.algorithm as tianshou_algorithms
import torch
from tianshou.algorithm import QRDQN, SAC
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.exploration import GaussianNoise
from tianshou.trainer import OfflineTrainerParams, OffPolicyTrainerParams
from tianshou.utils.net.common import Net
from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousActorProbabilistic, ContinuousCritic

from offline_rl.core.resources import tune_cpu_allocator
from offline_rl.runs.default_dataset import cache_dir

IMPLEMENTATIONS = {"tianshou": tianshou_algorithms, "offline_rl": offline_rl}


def load_cached(name: str, gather: Callable[[], VectorReplayBuffer]) -> VectorReplayBuffer:
    """A fresh copy of the gathered buffer for every run, as each Tianshou test loads its file (and
    Tianshou's CQL adds a column to the buffer it trains on, so a buffer cannot be shared)."""
    path = cache_dir() / name
    if not path.is_file():
        print(f"gathering {name} (once; cached in {path.parent}) ...", flush=True)
        buffer = gather()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as file:
            pickle.dump(buffer, file)
        tmp.replace(path)
    with path.open("rb") as file:
        return pickle.load(file)


def seed_everything(seed: int, *envs: DummyVectorEnv) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    for env in envs:
        env.seed(seed)


# --- Pendulum: gather_pendulum_data.py and test_cql.py ------------------------------------------


def gather_pendulum() -> VectorReplayBuffer:
    task = "Pendulum-v1"
    train_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(10)])
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(10)])
    seed_everything(0, train_envs, test_envs)
    net = Net(state_shape=(3,), hidden_sizes=[128, 128])
    actor = ContinuousActorProbabilistic(preprocess_net=net, action_shape=(1,), unbounded=True)
    net_c = Net(state_shape=(3,), action_shape=(1,), hidden_sizes=[128, 128], concat=True)
    critic = ContinuousCritic(preprocess_net=net_c)
    alpha = AutoAlpha(-1.0, 0.0, AdamOptimizerFactory(lr=3e-4))
    policy = SACPolicy(actor=actor, action_space=gym.make(task).action_space)
    algorithm = SAC(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-3),
        critic=critic,
        critic_optim=AdamOptimizerFactory(lr=1e-3),
        tau=0.005,
        gamma=0.99,
        alpha=alpha,
        n_step_return_horizon=3,
    )
    buffer = VectorReplayBuffer(20000, len(train_envs))
    training_collector = Collector(algorithm, train_envs, buffer, exploration_noise=True)
    algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=training_collector,
            test_collector=Collector(algorithm, test_envs),
            max_epochs=7,
            epoch_num_steps=8000,
            collection_step_num_env_steps=10,
            test_step_num_episodes=10,
            batch_size=256,
            update_step_num_gradient_steps_per_sample=0.125,
            stop_fn=lambda reward: reward >= -250,
            test_in_training=True,
        )
    )
    training_collector.reset()
    training_collector.collect(n_step=20000)
    return buffer


def pendulum_best_reward(algorithm: Any, buffer: VectorReplayBuffer, test_envs: DummyVectorEnv, test_num: int) -> float:
    """The Pendulum tests' training: 5 epochs of 500 updates (batch 64), an evaluation of `test_num`
    episodes after each, stopping once one reaches -1200; the best evaluation's return."""
    result = algorithm.run_training(
        OfflineTrainerParams(
            buffer=buffer,
            test_collector=Collector(algorithm, test_envs),
            max_epochs=5,
            epoch_num_steps=500,
            test_step_num_episodes=test_num,
            batch_size=64,
            stop_fn=lambda reward: reward >= -1200,
            show_progress=False,
        )
    )
    return float(result.best_reward)


def run_cql(implementation: Any, buffer: VectorReplayBuffer, seed: int) -> float:
    """test_cql.py's body from the data on; `implementation.CQL` is the only thing that varies."""
    task, test_num = "Pendulum-v1", 10
    env = gym.make(task)
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(test_num)])
    seed_everything(seed, test_envs)
    net_a = Net(state_shape=(3,), action_shape=(1,), hidden_sizes=[64, 64])
    actor = ContinuousActorProbabilistic(
        preprocess_net=net_a, action_shape=(1,), unbounded=True, conditioned_sigma=True
    )
    net_c = Net(state_shape=(3,), action_shape=(1,), hidden_sizes=[64, 64], concat=True)
    critic = ContinuousCritic(preprocess_net=net_c)
    alpha = AutoAlpha(-1.0, 0.0, AdamOptimizerFactory(lr=1e-3))
    policy = SACPolicy(actor=actor, action_scaling=False, action_space=env.action_space)
    algorithm = implementation.CQL(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-3),
        critic=critic,
        critic_optim=AdamOptimizerFactory(lr=1e-3),
        cql_alpha_lr=1e-3,
        cql_weight=1.0,
        tau=0.005,
        gamma=0.99,
        alpha=alpha,
        temperature=1.0,
        with_lagrange=True,
        lagrange_threshold=10.0,
        min_action=float(env.action_space.low[0]),
        max_action=float(env.action_space.high[0]),
    )
    return pendulum_best_reward(algorithm, buffer, test_envs, test_num)


def run_td3_bc(implementation: Any, buffer: VectorReplayBuffer, seed: int) -> float:
    """test_td3_bc.py's body from the data on; `implementation.TD3BC` is the only thing that varies."""
    task, test_num = "Pendulum-v1", 10
    env = gym.make(task)
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(test_num)])
    seed_everything(seed, test_envs)
    max_action = float(env.action_space.high[0])
    actor = ContinuousActorDeterministic(
        preprocess_net=Net(state_shape=(3,), hidden_sizes=[64, 64]), action_shape=(1,), max_action=max_action
    )
    critic1, critic2 = (
        ContinuousCritic(preprocess_net=Net(state_shape=(3,), action_shape=(1,), hidden_sizes=[64, 64], concat=True))
        for _ in range(2)
    )
    policy = ContinuousDeterministicPolicy(
        actor=actor, action_space=env.action_space, exploration_noise=GaussianNoise(sigma=0.1)
    )
    algorithm = implementation.TD3BC(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=1e-3),
        critic=critic1,
        critic_optim=AdamOptimizerFactory(lr=1e-3),
        critic2=critic2,
        critic2_optim=AdamOptimizerFactory(lr=1e-3),
        tau=0.005,
        gamma=0.99,
        policy_noise=0.2,
        update_actor_freq=2,
        noise_clip=0.5,
        alpha=2.5,
        n_step_return_horizon=3,
    )
    return pendulum_best_reward(algorithm, buffer, test_envs, test_num)


# --- CartPole: gather_cartpole_data.py and test_discrete_cql.py ---------------------------------


def gather_cartpole() -> VectorReplayBuffer:
    task = "CartPole-v1"
    train_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(10)])
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(100)])
    seed_everything(1, train_envs, test_envs)
    net = Net(state_shape=(4,), action_shape=(2,), hidden_sizes=[128, 128, 128, 128], softmax=False, num_atoms=200)
    policy = QRDQNPolicy(model=net, action_space=gym.make(task).action_space, eps_training=0.1, eps_inference=0.05)
    algorithm = QRDQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=1e-3),
        gamma=0.9,
        num_quantiles=200,
        n_step_return_horizon=3,
        target_update_freq=320,
    )
    buffer = VectorReplayBuffer(20000, len(train_envs))
    training_collector = Collector(algorithm, train_envs, buffer, exploration_noise=True)
    training_collector.reset()
    test_collector = Collector(algorithm, test_envs, exploration_noise=True)
    test_collector.reset()
    training_collector.collect(n_step=64 * 10)

    def anneal(epoch: int, env_step: int) -> None:
        if env_step <= 10000:
            policy.set_eps_training(0.1)
        elif env_step <= 50000:
            policy.set_eps_training(0.1 - (env_step - 10000) / 40000 * 0.09)
        else:
            policy.set_eps_training(0.01)

    algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=training_collector,
            test_collector=test_collector,
            max_epochs=10,
            epoch_num_steps=10000,
            collection_step_num_env_steps=10,
            test_step_num_episodes=100,
            batch_size=64,
            training_fn=anneal,
            stop_fn=lambda reward: reward >= 190,
            update_step_num_gradient_steps_per_sample=0.1,
            test_in_training=True,
        )
    )
    expert_buffer = VectorReplayBuffer(20000, len(test_envs))
    policy.set_eps_inference(0.2)
    collector = Collector(algorithm, test_envs, expert_buffer, exploration_noise=True)
    collector.reset()
    collector.collect(n_step=20000)
    return expert_buffer


def run_discrete_cql(
    implementation: Any,
    buffer: VectorReplayBuffer,
    seed: int,
    *,
    epochs: int = 5,
    stop_at: float | None = 170.0,
    returns: list[float] | None = None,
) -> float:
    """test_discrete_cql.py's body; `implementation.DiscreteCQL` is the only thing that varies.

    `stop_at=None` trains the whole budget (a learning check rather than the test); `returns`
    receives every evaluation's mean return.
    """
    task, test_num = "CartPole-v1", 100
    env = gym.make(task)
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(test_num)])
    seed_everything(seed, test_envs)
    net = Net(state_shape=(4,), action_shape=(2,), hidden_sizes=[64], softmax=False, num_atoms=200)
    policy = QRDQNPolicy(model=net, action_space=env.action_space)
    algorithm = implementation.DiscreteCQL(
        policy=policy,
        optim=AdamOptimizerFactory(lr=3e-3),
        gamma=0.99,
        num_quantiles=200,
        n_step_return_horizon=3,
        target_update_freq=500,
        min_q_weight=10.0,
    )

    def score(stats: Any) -> float:
        mean = float(np.mean(stats.returns))
        if returns is not None:
            returns.append(mean)
        return mean

    result = algorithm.run_training(
        OfflineTrainerParams(
            buffer=buffer,
            test_collector=Collector(algorithm, test_envs, exploration_noise=True),
            max_epochs=epochs,
            epoch_num_steps=1000,
            test_step_num_episodes=test_num,
            batch_size=32,
            stop_fn=None if stop_at is None else (lambda reward: reward >= stop_at),
            compute_score_fn=score,
            show_progress=False,
        )
    )
    return float(result.best_reward)


SCENARIOS = {
    "cql": ("Pendulum-v1 CQL", "tianshou_expert_SAC_Pendulum-v1.pkl", gather_pendulum, run_cql, -1200.0),
    "td3_bc": ("Pendulum-v1 TD3BC", "tianshou_expert_SAC_Pendulum-v1.pkl", gather_pendulum, run_td3_bc, -1200.0),
    "discrete_cql": (
        "CartPole-v1 DiscreteCQL",
        "tianshou_expert_QRDQN_CartPole-v1.pkl",
        gather_cartpole,
        run_discrete_cql,
        170.0,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--implementations", nargs="+", choices=list(IMPLEMENTATIONS), default=list(IMPLEMENTATIONS))
    args = parser.parse_args()
    # offline_rl's run_training tunes the process's allocator on a CPU; done here first, so that
    # Tianshou's runs get it too, whichever implementation runs first
    tune_cpu_allocator()
    rows = []
    for key in SCENARIOS if args.scenario == "all" else [args.scenario]:
        title, cache_name, gather, run, threshold = SCENARIOS[key]
        load_cached(cache_name, gather)
        for name in args.implementations:
            for seed in args.seeds:
                buffer = load_cached(cache_name, gather)
                start = time.perf_counter()
                best = run(IMPLEMENTATIONS[name], buffer, seed)
                seconds = time.perf_counter() - start
                verdict = "pass" if best >= threshold else "FAIL"
                rows.append((title, name, seed, best, threshold, verdict, seconds))
                outcome = f"best {best:8.1f} (needs {threshold:g}) {verdict}  {seconds:5.0f} s"
                print(f"{title:24s} {name:10s} seed {seed}: {outcome}", flush=True)
    print("\n| scenario | implementation | seed | best reward | threshold | result | wall time |")
    print("|---|---|---|---|---|---|---|")
    for title, name, seed, best, threshold, verdict, seconds in rows:
        print(f"| {title} | {name} | {seed} | {best:.1f} | {threshold:g} | {verdict} | {seconds:.0f} s |")


if __name__ == "__main__":
    main()
