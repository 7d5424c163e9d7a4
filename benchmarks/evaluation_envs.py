"""Evaluation environments: Tianshou's `DummyVectorEnv` (one process) against `SubprocVectorEnv` (one
process per env), stepping the examples' evaluation envs with random actions.

    python benchmarks/evaluation_envs.py [--envs 10] [--steps 300]

Evaluation runs the policy on a batch of observations and steps every env; the policy's cost is the
same either way, so this times the env side alone: `--steps` batched steps of `--envs` envs (reset
where an episode ends), best of 3. Tasks: HalfCheetah-v4 (MuJoCo, the D4RL example) and
PongNoFrameskip-v4 with the Atari example's evaluation wrappers.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import functools
import os
import time
from collections.abc import Callable

import numpy as np


def step_all(venv, steps: int, actions: Callable[[], np.ndarray]) -> None:
    """`steps` batched steps of every env of `venv` with `actions()`, resetting envs whose episode ended."""
    for _ in range(steps):
        _, _, terminated, truncated, _ = venv.step(actions())
        ended = np.flatnonzero(np.logical_or(terminated, truncated))
        if len(ended):
            venv.reset(ended)


def env_steps_per_second(vector_env_class: type, make, envs: int, steps: int) -> float:
    venv = vector_env_class([make for _ in range(envs)])
    try:
        venv.seed(list(range(envs)))
        venv.reset()
        space = venv.action_space[0]
        best = 0.0
        for _ in range(3):
            start = time.perf_counter()
            step_all(venv, steps, lambda: np.stack([space.sample() for _ in range(envs)]))
            best = max(best, steps * envs / (time.perf_counter() - start))
        return best
    finally:
        venv.close()


def main() -> None:
    from tianshou.env import DummyVectorEnv, SubprocVectorEnv

    from offline_rl.envs.atari import make_atari_env
    from offline_rl.envs.make import make_env

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    tasks = {
        "HalfCheetah-v4": functools.partial(make_env, "HalfCheetah-v4"),
        "PongNoFrameskip-v4": functools.partial(make_atari_env, "PongNoFrameskip-v4"),
    }
    print(f"cores available: {len(os.sched_getaffinity(0))}, {args.envs} envs, {args.steps} batched steps")
    for task, make in tasks.items():
        dummy = env_steps_per_second(DummyVectorEnv, make, args.envs, args.steps)
        subproc = env_steps_per_second(SubprocVectorEnv, make, args.envs, args.steps)
        ratio = subproc / dummy
        print(f"{task}: DummyVectorEnv {dummy:8.0f} env steps/s, SubprocVectorEnv {subproc:8.0f} ({ratio:.2f}×)")


if __name__ == "__main__":
    main()
