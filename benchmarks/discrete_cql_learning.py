"""Does discrete CQL learn? A fixed-budget check on locally generated expert data, ours against
Tianshou's `DiscreteCQL`, reporting the behaviour data's own score next to both.

    python benchmarks/discrete_cql_learning.py [--seeds 0 1 2] [--epochs 5]

The data is the CartPole-v1 expert data of Tianshou's own `test_discrete_cql.py` (a QR-DQN expert
trained online, then 20000 steps played at ε = 0.2; gathered once and cached, shared with
`tianshou_offline_tests.py`). Both algorithms get the same network, data and budget (`--epochs` ×
1000 updates, batch 32, evaluation of 100 episodes after every epoch, no early stop). The headline
is the last evaluation; the best is printed as optimistic. Not part of CI.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import time

import numpy as np
from tianshou_offline_tests import IMPLEMENTATIONS, gather_cartpole, load_cached, run_discrete_cql

from offline_rl.algorithms.staging import read_transitions
from offline_rl.data.stats import finished_episode_returns

CACHE_NAME = "tianshou_expert_QRDQN_CartPole-v1.pkl"


def behaviour_score(buffer) -> tuple[float, int]:
    """Mean return of the data's finished episodes, and how many there are."""
    stored = read_transitions(buffer)
    returns = finished_episode_returns(stored.rew, stored.episode_end, buffer.done[stored.indices])
    return float(returns.mean()), len(returns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    data_score, episodes = behaviour_score(load_cached(CACHE_NAME, gather_cartpole))
    rows = []
    for name in IMPLEMENTATIONS:
        for seed in args.seeds:
            returns: list[float] = []
            start = time.perf_counter()
            run_discrete_cql(
                IMPLEMENTATIONS[name], load_cached(CACHE_NAME, gather_cartpole), seed,
                epochs=args.epochs, stop_at=None, returns=returns,
            )  # fmt: skip
            seconds = time.perf_counter() - start
            trained = returns[1:]  # the trainer's first evaluation is of the untrained network
            rows.append((name, seed, trained[-1], max(trained), seconds))
            print(
                f"{name:10s} seed {seed}: untrained {returns[0]:.1f}, after each epoch "
                f"{[round(r, 1) for r in trained]}  {seconds:.0f} s",
                flush=True,
            )
    print(
        f"\nCartPole-v1, expert data: 20000 steps, {episodes} finished episodes, mean return {data_score:.1f}; "
        f"{args.epochs} × 1000 updates, 100 evaluation episodes"
    )
    print("| implementation | seed | last evaluation | best (optimistic) | wall time |")
    print("|---|---|---|---|---|")
    for name, seed, last, best, seconds in rows:
        print(f"| {name} | {seed} | {last:.1f} | {best:.1f} | {seconds:.0f} s |")
    for name in IMPLEMENTATIONS:
        lasts = [row[2] for row in rows if row[0] == name]
        print(f"| {name} | mean | {np.mean(lasts):.1f} ± {np.std(lasts):.1f} | | |")


if __name__ == "__main__":
    main()
