"""Write the d3rlpy dataset files the tests read, with d3rlpy itself (not a dependency of this project).

Run in a separate venv: `pip install torch==2.13.0 d3rlpy==2.8.1 && python tests/data/make_d3rlpy_files.py`.
Each `<name>.h5` is d3rlpy's own `dump` (format 2.1), made the way d3rlpy's users make theirs: an
algorithm's `collect` into a replay buffer, or an `MDPDataset` from arrays. Beside each, `<name>.npz`
holds every transition as d3rlpy's own `BasicTransitionPicker` reads it back from the file, so the tests
compare this project's loader with d3rlpy's reading without d3rlpy installed. d3rlpy 2.x no longer writes
its 1.x format, only reads it (`load_v1`): `d3rlpy-v1.h5` is written here as d3rlpy 1.x's
`MDPDataset.dump` wrote it, and its `.npz` is what d3rlpy 2.x's `load_v1` reads from it.
"""

from __future__ import annotations

from pathlib import Path

import d3rlpy
import gymnasium as gym
import h5py
import numpy as np

HERE = Path(__file__).resolve().parent


def collected(env_id: str, algo_config: object, steps: int, seed: int) -> d3rlpy.dataset.ReplayBuffer:
    """A replay buffer filled by an untrained d3rlpy algorithm playing `env_id` (episodes of both
    kinds, and the last one unfinished, as `collect` leaves it)."""
    d3rlpy.seed(seed)
    env = gym.make(env_id)
    env.reset(seed=seed)
    algo = algo_config.create(device="cpu:0")  # type: ignore[attr-defined]
    algo.build_with_env(env)
    buffer = d3rlpy.dataset.create_fifo_replay_buffer(limit=100_000, env=env)
    algo.collect(env, buffer=buffer, n_steps=steps, show_progress=False)
    return buffer


def from_arrays(seed: int) -> d3rlpy.dataset.MDPDataset:
    """An `MDPDataset` of tuple observations (two vectors a step), with a terminal and a time-out."""
    rng = np.random.default_rng(seed)
    size = 30
    observations = [rng.normal(size=(size, 3)).astype(np.float32), rng.normal(size=(size, 2)).astype(np.float32)]
    actions = rng.uniform(-1, 1, size=(size, 2)).astype(np.float32)
    rewards = rng.normal(size=size).astype(np.float32)
    terminals = np.zeros(size)
    terminals[9] = 1
    timeouts = np.zeros(size)
    timeouts[19] = 1
    timeouts[29] = 1
    return d3rlpy.dataset.MDPDataset(observations, actions, rewards, terminals, timeouts)


def write_v1(path: Path, seed: int) -> None:
    """A d3rlpy 1.x file (`MDPDataset.dump` of 1.x): flat columns, `episode_terminals` marking every
    episode end, discrete actions as int32 indices. Two terminals and a time-out, ending on an end."""
    rng = np.random.default_rng(seed)
    size = 40
    terminals = np.zeros(size, dtype=np.float32)
    terminals[[11, 39]] = 1.0
    episode_terminals = terminals.copy()
    episode_terminals[24] = 1.0  # a time-out: an episode end that is not a terminal
    with h5py.File(path, "w") as file:
        file.create_dataset("observations", data=rng.normal(size=(size, 4)).astype(np.float32))
        file.create_dataset("actions", data=rng.integers(0, 2, size=size).astype(np.int32))
        file.create_dataset("rewards", data=rng.normal(size=size).astype(np.float32))
        file.create_dataset("terminals", data=terminals)
        file.create_dataset("episode_terminals", data=episode_terminals)
        file.create_dataset("discrete_action", data=True)
        file.create_dataset("version", data="1.0")


def transitions_as_d3rlpy_reads(path: Path) -> dict[str, np.ndarray]:
    """Every transition of the dumped file, loaded back by d3rlpy and picked by its BasicTransitionPicker."""
    with path.open("rb") as file:
        if path.name == "d3rlpy-v1.h5":
            dataset = d3rlpy.dataset.ReplayBuffer(
                d3rlpy.dataset.InfiniteBuffer(), episodes=d3rlpy.dataset.io.load_v1(file)
            )
        else:
            dataset = d3rlpy.dataset.ReplayBuffer.load(file, d3rlpy.dataset.InfiniteBuffer())
    picker = d3rlpy.dataset.BasicTransitionPicker()
    rows: dict[str, list[np.ndarray]] = {key: [] for key in ("obs", "act", "rew", "obs_next", "terminal")}
    for episode in dataset.episodes:
        for index in range(episode.transition_count):
            transition = picker(episode, index)
            flatten = (
                (lambda o: np.concatenate([np.ravel(part) for part in o]))
                if isinstance(transition.observation, list | tuple)
                else np.ravel
            )
            rows["obs"].append(flatten(transition.observation))
            rows["obs_next"].append(flatten(transition.next_observation))
            rows["act"].append(np.asarray(transition.action))
            rows["rew"].append(np.asarray(transition.reward).reshape(()))
            rows["terminal"].append(np.asarray(transition.terminal))
    return {key: np.stack(value) for key, value in rows.items()}


def main() -> None:
    made = {
        "d3rlpy-pendulum": collected("Pendulum-v1", d3rlpy.algos.SACConfig(), steps=450, seed=0),
        "d3rlpy-cartpole": collected("CartPole-v1", d3rlpy.algos.DQNConfig(), steps=300, seed=0),
        "d3rlpy-tuple": from_arrays(seed=0),
    }
    for name, dataset in made.items():
        path = HERE / f"{name}.h5"
        with path.open("w+b") as file:  # h5py reads back while writing
            dataset.dump(file)
        print(f"{path.name}: {dataset.transition_count} transitions in {len(dataset.episodes)} episodes")
    write_v1(HERE / "d3rlpy-v1.h5", seed=0)
    for name in (*made, "d3rlpy-v1"):
        np.savez_compressed(HERE / f"{name}.npz", **transitions_as_d3rlpy_reads(HERE / f"{name}.h5"))


if __name__ == "__main__":
    main()
