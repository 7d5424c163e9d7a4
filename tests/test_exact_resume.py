"""A stopped and resumed run trains exactly as the run that was never stopped, and an evaluation's
score depends on the weights and `--seed` alone (`offline_rl.core.random_state`,
`offline_rl.runs.evaluation_collector`)."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_d4rl_cql_example import TINY

from conftest import run_in_process
from offline_rl.core.random_state import capture_random_state, preserved_random_state, restore_random_state
from offline_rl.runs.checkpoint import load_checkpoint, save_checkpoint
from offline_rl.runs.evaluation_collector import EvaluationCollector


def draws() -> tuple[float, float, float, float]:
    return random.random(), float(np.random.rand()), float(np.random.randn()), float(torch.rand(()))


def test_the_generators_come_back_from_a_checkpoint_as_they_were(tmp_path: Path) -> None:
    np.random.randn()  # numpy keeps the second of each pair of normal draws: part of its state
    saved = capture_random_state()
    expected = draws()
    assert draws() != expected  # the generators moved on
    save_checkpoint(tmp_path / "c.pth", torch.nn.Linear(1, 1), random_state=saved)
    restore_random_state(load_checkpoint(tmp_path / "c.pth")["random_state"])  # weights_only=True
    assert draws() == expected


def test_work_beside_training_does_not_shift_its_draws() -> None:
    state = capture_random_state()
    expected = draws()
    restore_random_state(state)
    with preserved_random_state():
        torch.nn.Linear(64, 64)  # initialisation draws, as exporting a policy file does
        draws()
    assert draws() == expected


def cartpole_policy(eps: float):
    """A discrete CQL policy that always prefers action 0, playing ε-greedy at `eps` when evaluated."""
    from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig

    env = gym.make("CartPole-v1")
    algorithm = CQLQRDQN.build(
        env.observation_space, env.action_space, DiscreteCQLConfig(num_quantiles=4, eps_test=eps, hidden_sizes=[8])
    )
    last = [m for m in algorithm.model.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([1.0] * 4 + [0.0] * 4))  # quantiles of action 0 above action 1's
    algorithm.eval()
    return algorithm.policy


def evaluation_collector(policy, num_envs: int = 3, subprocesses: bool = False) -> EvaluationCollector:
    from tianshou.env import DummyVectorEnv, SubprocVectorEnv

    vector_env = SubprocVectorEnv if subprocesses else DummyVectorEnv
    return EvaluationCollector(policy, vector_env([lambda: gym.make("CartPole-v1")] * num_envs), seed=10_000)


def test_an_evaluation_plays_eps_test() -> None:
    """Tianshou applies ε only in a collector made with `exploration_noise=True`; before, the
    discrete examples' evaluations and `--watch` were greedy whatever `--eps-test` said."""
    greedy = evaluation_collector(cartpole_policy(0.0))
    greedy.reset()
    greedy.collect(n_step=60)
    assert set(greedy.buffer.act[greedy.buffer.sample_indices(0)].tolist()) == {0}
    random_play = evaluation_collector(cartpole_policy(1.0))
    random_play.reset()
    random_play.collect(n_step=60)
    actions = random_play.buffer.act[random_play.buffer.sample_indices(0)]
    assert len(actions) == 60 and 0.25 < actions.mean() < 0.75  # uniform over both actions


@pytest.mark.parametrize("subprocesses", [False, True], ids=["one process", "a process per env"])
def test_every_evaluation_replays_the_same_episodes_and_leaves_training_draws_alone(subprocesses: bool) -> None:
    collector = evaluation_collector(cartpole_policy(0.5), subprocesses=subprocesses)
    results = []
    for _ in range(2):
        np.random.seed(len(results))  # training left numpy's generator somewhere else each time
        collector.reset(reset_stats=False)  # as Tianshou's trainer does before each evaluation
        training_state = np.random.get_state()
        result = collector.collect(n_episode=3)
        assert np.random.get_state()[2] == training_state[2]  # handed back as it was found
        np.testing.assert_array_equal(np.random.get_state()[1], training_state[1])
        results.append((sorted(result.returns.tolist()), sorted(result.lens.tolist())))
    assert results[0] == results[1]
    assert len(set(results[0][1])) > 1  # the three envs start differently: each is seeded on its own
    collector.close()


def test_the_largest_seed_evaluates() -> None:
    """--seed 4294967295 is valid; its evaluation seed (+ 10 000) is past numpy's 32 bits."""
    from tianshou.env import DummyVectorEnv

    envs = DummyVectorEnv([lambda: gym.make("CartPole-v1")])
    collector = EvaluationCollector(cartpole_policy(0.5), envs, seed=2**32 - 1 + 10_000)
    collector.reset()
    assert collector.collect(n_episode=1).n_collected_episodes == 1


def checkpoint_state(path: Path, parts: tuple[str, ...] = ("algorithm", "random_state")) -> dict[str, torch.Tensor]:
    """The algorithm's tensors and the generators' states a checkpoint holds (its `parts`), flattened."""
    flat: dict[str, torch.Tensor] = {}

    def visit(value, name: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{name}/{key}")
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                visit(item, f"{name}/{index}")
        else:
            flat[name] = value if isinstance(value, torch.Tensor) else torch.tensor(float(value or 0))

    payload = torch.load(path, weights_only=True)
    for part in parts:
        visit(payload[part], part)
    return flat


def assert_same_checkpoints(first: Path, second: Path, *, exact: bool) -> None:
    """Equal tensors and generators; off `exact` (CUDA kernels need not sum in one order), floats to rounding."""
    a, b = checkpoint_state(first), checkpoint_state(second)
    assert a.keys() == b.keys()

    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        if exact or not x.is_floating_point():
            return torch.equal(x, y)
        return torch.allclose(x, y, rtol=1e-4, atol=1e-6)

    differing = [name for name in a if not same(a[name], b[name])]
    assert not differing, differing[:5]


def evaluations(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^evaluation (.+?) \(\d+ episodes?\): (return .+)$", stdout, flags=re.MULTILINE))


def assert_same_evaluation(first: str, second: str, *, exact: bool) -> None:
    if exact:
        assert first == second
    else:
        numbers = [[float(value) for value in re.findall(r"-?\d+\.\d+", text)] for text in (first, second)]
        assert numbers[0] == pytest.approx(numbers[1], rel=1e-3, abs=1e-2), (first, second)


def run_folder(log: Path) -> Path:
    (folder,) = [path.parent for path in log.rglob("checkpoint.pth")]
    return folder


def run_ok(script: str, *args: str, cwd: Path) -> str:
    """`script`'s output, after checking that it succeeded."""
    done = run_in_process(script, *args, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def assert_resume_is_exact(script: str, flags: list[str], cwd: Path, device: str = "cpu") -> Path:
    """Two epochs straight, and one epoch then a resume to two: the same evaluations, the same
    weights, optimiser states and generators at the end (on CUDA, to float rounding). Returns the
    stopped run's folder."""
    machine = ["--threads", "1", "--device", device]  # one thread: the same float sums in every run
    straight = run_ok(script, *flags, *machine, "--epoch", "2", "--logdir", "straight", cwd=cwd)
    first = run_ok(script, *flags, *machine, "--epoch", "1", "--logdir", "stopped", cwd=cwd)
    stopped = run_folder(cwd / "stopped")
    shutil.copy(stopped / "checkpoint.pth", cwd / "epoch-1.pth")  # as the stop left it
    resumed = run_ok(script, "--resume-path", str(stopped / "checkpoint.pth"), "--epoch", "2", *machine, cwd=cwd)

    exact = device == "cpu"
    uninterrupted = evaluations(straight)
    assert_same_evaluation(evaluations(first)["1"], uninterrupted["1"], exact=exact)
    # The resumed weights score what they scored when saved, and the epoch after is the same epoch.
    assert_same_evaluation(evaluations(resumed)["1 of the resumed weights"], uninterrupted["1"], exact=exact)
    assert_same_evaluation(evaluations(resumed)["2"], uninterrupted["2"], exact=exact)
    straight_checkpoint = run_folder(cwd / "straight") / "checkpoint.pth"
    assert_same_checkpoints(straight_checkpoint, stopped / "checkpoint.pth", exact=exact)
    return stopped


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",  # the captured update: is the graph's draw the same after a resume re-captures it?
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


@pytest.mark.parametrize("device", DEVICES)
def test_a_continuous_run_stopped_and_resumed_trains_as_the_one_never_stopped(tmp_path: Path, device: str) -> None:
    """Before, the resumed run reseeded its generators from --seed and its evaluation envs afresh,
    and the export of each new best policy drew from the run's generator: the same two epochs gave
    other weights and other scores when stopped after the first."""
    stopped = assert_resume_is_exact("examples/d4rl_cql.py", TINY, tmp_path, device)
    if device != "cpu":
        return

    # Where the run stopped comes from the checkpoint alone, not from the TensorBoard events written
    # after it: a checkpoint with no events beside it (a stop between the two writes, or a copy) resumes
    # at its epoch, and ends where the uninterrupted run ended.
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(tmp_path / "epoch-1.pth", moved / "checkpoint.pth")
    resume = ["--resume-path", str(moved / "checkpoint.pth"), "--epoch", "2", "--threads", "1", "--device", "cpu"]
    again = run_ok("examples/d4rl_cql.py", *resume, cwd=tmp_path)
    assert ": 15 updates (30 in all) in " in again, again[-2000:]
    assert_same_checkpoints(run_folder(tmp_path / "straight") / "checkpoint.pth", moved / "checkpoint.pth", exact=True)

    # `--watch` of the best policy prints the score the run printed for it.
    best = torch.load(stopped / "policy.pth", weights_only=True)["best_evaluation"]
    watched = run_ok(
        "examples/d4rl_cql.py", "--watch", "--resume-path", str(stopped / "policy.pth"), "--test-num", "1", cwd=tmp_path
    )
    assert f"return {best['return_mean']:.2f} ± " in watched

    # Training goes on from checkpoint.pth only: a policy file is one evaluation's weights, without
    # the epoch, counters and generators of where the run stopped (it used to restart the numbering).
    for policy_file in ("policy.pth", "policy_last.pth"):
        refused = run_in_process(
            "examples/d4rl_cql.py", "--resume-path", str(stopped / policy_file), "--epoch", "3", cwd=tmp_path
        )
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert "resuming the run" not in refused.stdout  # refused before it is announced
        assert refused.stderr.strip().splitlines()[-1] == (
            f"error: --resume-path {stopped / policy_file}: the weights of one evaluation (policy.pth or "
            "policy_last.pth), not where the run stopped; continue training from the checkpoint.pth beside it, "
            "or evaluate this file with --watch"
        )


def test_a_discrete_run_stopped_and_resumed_trains_as_the_one_never_stopped(tmp_path: Path) -> None:
    """Discrete CQL with ε-greedy evaluations (whose coins used to come from training's generator)."""
    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
    run_ok("examples/atari_qrdqn.py", *collect, "--save-buffer-name", "cartpole.hdf5", cwd=tmp_path)
    budget = ["--task", "CartPole-v1", "--load-buffer-name", "cartpole.hdf5", "--update-per-epoch", "20"]
    assert_resume_is_exact(
        "examples/atari_cql.py", [*budget, "--test-num", "2", "--num-quantiles", "8", "--eps-test", "0.3"], tmp_path
    )


def test_a_resumed_run_keeps_the_thread_count_its_run_chose(tmp_path: Path) -> None:
    """On a CPU the thread count orders a product's sums: the count a run chose is recorded, and its
    resume keeps it rather than choosing afresh for the machine's load of the moment."""
    threads_before = torch.get_num_threads()
    try:
        train = [*TINY, "--epoch", "1", "--logdir", "log"]
        first = run_in_process("examples/d4rl_cql.py", *train, cwd=tmp_path, env_extra={"OMP_NUM_THREADS": "2"})
        assert first.returncode == 0, first.stderr[-2000:]
        assert "torch CPU threads: 2 (OMP_NUM_THREADS" in first.stdout
        checkpoint = run_folder(tmp_path / "log") / "checkpoint.pth"
        assert load_checkpoint(checkpoint)["config"]["run"]["torch"]["threads"] == 2
        resume = ["--resume-path", str(checkpoint), "--epoch", "2"]
        resumed = run_in_process("examples/d4rl_cql.py", *resume, cwd=tmp_path, env_extra={"OMP_NUM_THREADS": "1"})
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "torch CPU threads: 2 (--threads, or the count of the run being resumed)" in resumed.stdout
    finally:
        torch.set_num_threads(threads_before)


def test_a_discrete_run_stopped_between_two_updates_goes_on_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM in the middle of an epoch: the update under way ends, the checkpoint records the updates
    made into the epoch, and the resume trains the rest of it, ending where the run never stopped ends."""
    import os
    import signal

    from offline_rl.algorithms.base import CountedOfflineAlgorithm

    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
    run_ok("examples/atari_qrdqn.py", *collect, "--save-buffer-name", "cartpole.hdf5", cwd=tmp_path)
    flags = ["--task", "CartPole-v1", "--load-buffer-name", "cartpole.hdf5", "--update-per-epoch", "20"]
    flags += ["--test-num", "2", "--num-quantiles", "8", "--epoch", "2", "--threads", "1", "--device", "cpu"]
    straight = run_ok("examples/atari_cql.py", *flags, "--logdir", "straight", cwd=tmp_path)

    update, calls = CountedOfflineAlgorithm.update, []

    def stopped_at_the_27th(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 27:  # epoch 2's seventh update
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(CountedOfflineAlgorithm, "update", stopped_at_the_27th)
    stopped = run_in_process("examples/atari_cql.py", *flags, "--logdir", "stopped", cwd=tmp_path)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "interrupted after 27 updates; continue with --resume-path " in stopped.stdout
    checkpoint = run_folder(tmp_path / "stopped") / "checkpoint.pth"
    assert (torch.load(checkpoint, weights_only=True)["epoch_steps_done"]) == 7
    monkeypatch.setattr(CountedOfflineAlgorithm, "update", update)
    resumed = run_ok("examples/atari_cql.py", "--resume-path", str(checkpoint), cwd=tmp_path)
    assert ": 13 updates (40 in all) in " in resumed and "of the resumed weights" not in resumed
    assert evaluations(resumed)["2"] == evaluations(straight)["2"]
    assert_same_checkpoints(run_folder(tmp_path / "straight") / "checkpoint.pth", checkpoint, exact=True)
