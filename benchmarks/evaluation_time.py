"""Where one evaluation of `d4rl_cql.py` spends its time: the envs, the policy, or the collector.

    python benchmarks/evaluation_time.py [--task HalfCheetah-v4] [--test-num 10] [--device auto] [--rounds 3]
    python benchmarks/evaluation_time.py --task PongNoFrameskip-v4 --rounds 1   # atari_cql.py's evaluation

Why: on a GPU an evaluation of 10 episodes with Tianshou's collector loop takes about as long as an
epoch's 5000 updates, so a whole run spends about half its time evaluating. Four
timings, each the median of `--rounds` (the two evaluations alternate):
- `evaluation, Tianshou's loop` and `evaluation, ours`: one evaluation as a run makes it: the
  examples' default networks (untrained) on `--device`, the run's `EvaluationCollector` over its envs
  (`vector_envs`: subprocesses from 4 cores on), `collect(n_episode=test_num)`, played by Tianshou's
  `Collector._collect` or by the collector's own loop (which must give the same returns: checked);
- `envs alone`: as many env steps, in batched steps of all `test_num` envs of the same kind, with
  zero actions (an env whose episode ends is reset);
- `policy alone`: as many policy calls as the collector made (one per step, the longest episode's
  length), each on a batch of `test_num` observations, mapped to the env's action box and brought
  back to the host as numpy, as the collector does.
What remains of each evaluation is its loop's own bookkeeping (Tianshou's: `Batch`es of the envs'
info dicts, the buffer it adds each step to, its statistics). Also the memory each loop leaves held
(resident set growth over its first evaluation; Tianshou's keeps its buffer). An Atari game (for
`--task`) gets `atari_cql.py`'s evaluation instead: its default Nature-CNN QR-DQN policy, untrained,
on whole games with 4-frame stacks, under its default protocol (sticky actions).
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import functools
import os
import statistics
import time
from typing import Any

import numpy as np
import torch
from evaluation_envs import step_all
from tianshou.data import Batch, to_numpy

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.discrete_cql import CQLQRDQN
from offline_rl.cli.atari_cql import AtariCQLConfig, make_evaluation_env
from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.atari import is_atari_game
from offline_rl.envs.make import make_env
from offline_rl.runs.config import RunConfig
from offline_rl.runs.session import pick_device
from offline_rl.runs.training import evaluation_collector, vector_envs


def median_seconds(run, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="HalfCheetah-v4")
    parser.add_argument("--test-num", "--test_num", type=int, default=10)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)  # the same untrained policy, so the same episodes, in every run of the script
    try:
        device = pick_device(args.device)
        atari = is_atari_game(args.task)
        if atari:  # the env atari_cql.py evaluates on: its default protocol (sticky actions), stacks padded
            make = functools.partial(make_evaluation_env, AtariCQLConfig(), args.task, "reset")
        else:
            make = functools.partial(make_env, args.task)
        env = make()
    except OfflineRLError as error:
        raise SystemExit(f"error: {error}") from None
    build, config = (CQLQRDQN.build, AtariCQLConfig().algorithm) if atari else (CQLSAC.build, CQLSACConfig())
    algorithm = build(env.observation_space, env.action_space, config, device=device)
    algorithm.eval()
    collector = evaluation_collector(algorithm.policy, make, RunConfig(seed=0, test_num=args.test_num))
    warm_up_observations, _ = collector.env.reset()
    with torch.no_grad():  # the device's first products load its kernel libraries: not either loop's memory
        algorithm.policy(Batch(obs=warm_up_observations, info={}))
    collector.reset()

    def evaluate(own_loop: bool) -> Any:
        collector.own_loop = own_loop
        return collector.collect(n_episode=args.test_num, reset_before_collect=True)

    before = resident_mib()
    stats = evaluate(True)
    held = {True: resident_mib() - before}
    before = resident_mib()
    reference = evaluate(False)
    held[False] = resident_mib() - before
    if not np.array_equal(stats.returns, reference.returns):
        raise SystemExit(f"the two loops' returns differ: {stats.returns} against Tianshou's {reference.returns}")
    steps = stats.n_collected_steps
    batched_steps = -(-steps // args.test_num)  # the same env steps, every env stepped at once
    policy_calls = int(max(stats.lens))  # one per collector step, over the envs whose episode still runs
    timings: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for own_loop in (False, True):
            start = time.perf_counter()
            evaluate(own_loop)
            timings[own_loop].append(time.perf_counter() - start)
    tianshou_loop, own_loop = (statistics.median(timings[own]) for own in (False, True))
    kind = type(collector.env).__name__
    collector.env.close()

    envs = vector_envs(make, args.test_num, 0)
    zeros = np.zeros((args.test_num, *env.action_space.shape), dtype=env.action_space.dtype)

    def step_envs() -> None:
        envs.reset()
        step_all(envs, batched_steps, lambda: zeros)

    envs_alone = median_seconds(step_envs, args.rounds)
    observations, _ = envs.reset()
    envs.close()

    def call_policy() -> None:
        with torch.no_grad():
            for _ in range(policy_calls):
                result = algorithm.policy(Batch(obs=observations, info={}))
                algorithm.policy.map_action(to_numpy(result.act))

    policy_alone = median_seconds(call_policy, args.rounds)
    print(
        f"{args.task}, {args.test_num} episodes ({steps} env steps, {policy_calls} policy calls), policy on {device}, "
        f"envs in {kind}; median of {args.rounds}; both loops return {stats.returns_stat.mean:.6f} on average"
    )
    print(f"envs alone:   {envs_alone:6.2f} s")
    print(f"policy alone: {policy_alone:6.2f} s")
    for name, evaluation, own in (("Tianshou's loop", tianshou_loop, False), ("ours", own_loop, True)):
        rest = evaluation - envs_alone - policy_alone
        print(
            f"evaluation, {name + ':':16} {evaluation:6.2f} s; the loop's own {rest:5.2f} s "
            f"({100 * rest / evaluation:.0f}% of the evaluation); memory held after it {held[own]:+.0f} MiB"
        )
    print(f"ours ÷ Tianshou's loop: {own_loop / tianshou_loop:.2f} of the time")


if __name__ == "__main__":
    main()
