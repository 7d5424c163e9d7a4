"""Does fitted Q evaluation (`--fqe-updates`, `offline_rl.algorithms.fqe`) tell policies apart as the env does?

On CartPole-v1 (discrete actions) or Pendulum-v1 (continuous), four deterministic controllers of known
and very different quality are estimated by FQE from one dataset that none of them recorded alone
(episodes of each controller with ε-random actions), and played in the env from seeded resets for their
true discounted return. FQE bootstraps through the data's time-outs, so it estimates the value of a
task that goes on: the truth is played to the registered time limit on CartPole (500 steps, γ^500 =
0.7%) and to 1000 steps on Pendulum (whose data stops every 200). The table gives both side by side for
each FQE seed, and whether FQE orders the controllers as the env does.

    python benchmarks/fqe_accuracy.py [--task CartPole-v1] [--updates 20000] [--dataset-steps 50000] [--seeds 0 1]
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from offline_rl.algorithms.fqe import fitted_q_evaluation
from offline_rl.data.transitions import make_replay_buffer

GAMMA = 0.99
Controller = Callable[[np.ndarray], Any]


def _angle(obs: np.ndarray) -> float:
    return float(np.arctan2(obs[1], obs[0]))  # Pendulum: 0 upright


def _balance(obs: np.ndarray) -> float:
    return float(np.clip(-(10 * _angle(obs) + 2 * obs[2]), -2, 2))


CONTROLLERS: dict[str, dict[str, Controller]] = {
    "CartPole-v1": {
        "angle and its rate": lambda s: int(s[2] + 0.5 * s[3] > 0),  # balances for the 500 steps
        "angular rate only": lambda s: int(s[3] > 0),
        "angle only": lambda s: int(s[2] > 0),
        "always right": lambda s: 1,
    },
    "Pendulum-v1": {
        "pump, then balance near the top": lambda s: _balance(s) if s[0] > 0.8 else float(np.clip(2 * s[2], -2, 2)),
        "no torque": lambda s: 0.0,
        "full torque one way": lambda s: 2.0,
        "full torque against the swing": lambda s: -2.0 * float(np.sign(s[2])),
    },
}
TRUTH_STEPS = {"CartPole-v1": None, "Pendulum-v1": 1000}  # None: the registered time limit


def as_action(task: str, value: Any) -> Any:
    return int(value) if task == "CartPole-v1" else np.array([value], np.float32)


def random_action(task: str, generator: np.random.Generator) -> Any:
    return int(generator.integers(2)) if task == "CartPole-v1" else np.array([generator.uniform(-2, 2)], np.float32)


def true_discounted_return(task: str, controller: Controller, episodes: int) -> tuple[float, float]:
    """Mean and standard deviation of Σ γ^t r_t from `episodes` seeded resets."""
    env, returns = gym.make(task, max_episode_steps=TRUTH_STEPS[task]), []
    for seed in range(episodes):
        obs, _ = env.reset(seed=10_000 + seed)
        total, discount = 0.0, 1.0
        while True:
            obs, reward, terminated, truncated, _ = env.step(as_action(task, controller(obs)))
            total += discount * float(reward)
            discount *= GAMMA
            if terminated or truncated:
                break
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def mixed_dataset(task: str, steps: int, epsilon: float, seed: int):
    """Whole episodes, each of one controller (drawn at random) with ε-random actions, until `steps`."""
    generator = np.random.default_rng(seed)
    env, controllers = gym.make(task), list(CONTROLLERS[task].values())
    columns: dict[str, list] = {key: [] for key in ("obs", "act", "rew", "terminated", "truncated", "obs_next")}
    episode = 0
    while len(columns["obs"]) < steps:
        controller = controllers[generator.integers(len(controllers))]
        obs, _ = env.reset(seed=seed * 100_000 + episode)
        episode += 1
        while True:
            explore = generator.random() < epsilon
            action = random_action(task, generator) if explore else as_action(task, controller(obs))
            following, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(columns, (obs, action, reward, terminated, truncated, following), strict=True):
                columns[key].append(value)
            obs = following
            if terminated or truncated:
                break
    arrays = {key: np.asarray(values) for key, values in columns.items()}
    for key in ("obs", "obs_next") if task == "CartPole-v1" else ("obs", "obs_next", "act"):
        arrays[key] = arrays[key].astype(np.float32)
    return make_replay_buffer(**arrays)


def rank_agreement(estimates: list[float], truths: list[float]) -> float:
    """Spearman's rank correlation of the estimates with the true values."""
    ranks = [np.argsort(np.argsort(values)) for values in (estimates, truths)]
    return float(np.corrcoef(*ranks)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(CONTROLLERS), default="CartPole-v1")
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--dataset-steps", type=int, default=50_000)
    parser.add_argument("--epsilon", type=float, default=0.3)
    parser.add_argument("--episodes", type=int, default=100, help="env episodes per controller for the truth")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    task, discrete = args.task, args.task == "CartPole-v1"
    controllers = CONTROLLERS[task]
    buffer = mixed_dataset(task, args.dataset_steps, args.epsilon, seed=0)
    starts = int(np.asarray(buffer.done).sum())
    print(
        f"{task} dataset: {len(buffer)} steps, {starts} episodes, ε {args.epsilon}; γ {GAMMA}, "
        f"{args.updates} FQE updates"
    )
    truths = {name: true_discounted_return(task, controller, args.episodes) for name, controller in controllers.items()}
    estimates: dict[int, list[float]] = {}
    for seed in args.seeds:
        estimates[seed] = []
        for controller in controllers.values():
            began = time.perf_counter()
            estimate = fitted_q_evaluation(
                buffer,
                lambda obs, act=controller: np.array(
                    [as_action(task, act(row)) for row in obs], np.int64 if discrete else np.float32
                ),
                discrete=discrete,
                action_size=2 if discrete else 1,
                gamma=GAMMA,
                updates=args.updates,
                batch_size=args.batch_size,
                seed=seed,
            )
            estimates[seed].append(estimate.value)
            print(f"  seed {seed}: {estimate.value:.2f} in {time.perf_counter() - began:.0f} s")
    print()
    print(
        "| controller | true discounted return (mean ± sd) | " + " | ".join(f"FQE, seed {s}" for s in args.seeds) + " |"
    )
    print("|---|---|" + "---|" * len(args.seeds))
    for index, (name, (mean, spread)) in enumerate(truths.items()):
        cells = " | ".join(f"{estimates[seed][index]:.1f}" for seed in args.seeds)
        print(f"| {name} | {mean:.1f} ± {spread:.1f} | {cells} |")
    true_means = [mean for mean, _ in truths.values()]
    for seed in args.seeds:
        errors = np.abs(np.array(estimates[seed]) - np.array(true_means)) / np.abs(np.array(true_means))
        print(
            f"seed {seed}: rank correlation with the truth {rank_agreement(estimates[seed], true_means):.2f}, "
            f"relative errors {', '.join(f'{error:.0%}' for error in errors)}"
        )


if __name__ == "__main__":
    main()
