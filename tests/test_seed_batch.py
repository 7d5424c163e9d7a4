"""Many seeds in one update (`offline_rl.algorithms.seeds`): S seeds batched give what S separate runs
give from the same batches and the same noise, for every algorithm, through the whole update path
(draw, losses under vmap, one backward pass, the stacked optimiser steps, the count, the statistics);
a member's checkpoint is a single run's and resumes as one; a batched run resumes exactly; a diverged
seed leaves and the others train on."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_cql_sac_training import narrow_band_buffer, small_config
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.cql_sac import CQLSAC
from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.seeds import SeedBatch
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig
from offline_rl.algorithms.training_stats import stat_names
from offline_rl.data.transitions import make_replay_buffer

SPACES = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
SEEDS = 3
BATCH = 16
BUILDERS: dict[str, Callable[[], Any]] = {
    # Lagrange and per-critic gradient clipping: the conservative weight and the norms are per seed
    "cql_sac": lambda: CQLSAC.build(*SPACES, small_config(with_lagrange=True, max_grad_norm=0.5)),
    "cal_ql": lambda: CQLSAC.build(*SPACES, small_config(calibrated=True, bc_steps=2)),
    "td3_bc": lambda: TD3BC.build(*SPACES, TD3BCConfig(hidden_sizes=[16, 16])),
    "iql": lambda: IQL.build(*SPACES, IQLConfig(hidden_sizes=[16, 16], schedule_updates=8)),
    "rebrac": lambda: ReBRAC.build(*SPACES, ReBRACConfig(hidden_sizes=[16, 16])),
    "bc": lambda: BC.build(*SPACES, BCConfig(hidden_sizes=[16, 16], top_fraction=0.5)),
    "discrete_cql": lambda: CQLQRDQN.build(
        SPACES[0], gym.spaces.Discrete(3), DiscreteCQLConfig(num_quantiles=5, hidden_sizes=[16], target_update_freq=2)
    ),
}


def discrete_buffer(size: int = 600, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(size, 3)).astype(np.float32)
    return make_replay_buffer(
        obs=obs,
        act=rng.integers(0, 3, size),
        rew=rng.normal(size=size).astype(np.float32),
        terminated=rng.random(size) < 0.05,
        truncated=np.zeros(size, bool),
        obs_next=np.roll(obs, -1, axis=0),
    )


def buffer_for(name: str) -> Any:
    return discrete_buffer() if name == "discrete_cql" else narrow_band_buffer(600)


def members(name: str, seeds: int = SEEDS) -> list[Any]:
    built = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        built.append(BUILDERS[name]())
    return built


def fix_draws(algo: Any, buffer: Any, rows: list[torch.Tensor]) -> None:
    """Make `algo`'s next draws the given rows, one tensor per update (flattened for a seed batch)."""
    algo.plan(len(rows))
    staged = algo.staged(buffer)
    queue = list(rows)

    def draw(count: int, *_: Any) -> Any:
        taken = queue.pop(0).reshape(-1)
        assert len(taken) == count
        return staged.take(taken)

    staged.sample = draw
    staged.sample_batches = draw


def train(algo: Any, buffer: Any, updates: int, first_noise: int = 100) -> list[np.ndarray]:
    """`updates` updates, noise seeded per update; the statistics of each (every window is one update)."""
    figures = []
    with policy_within_training_step(algo.policy):
        for update in range(updates):
            torch.manual_seed(first_noise + update)
            stats = algo.update(buffer, BATCH)
            figures.append(np.array([getattr(stats, name) for name in stat_names(algo.STATS)]))
    return figures


def member_figures(member: Any) -> np.ndarray:
    return np.array([getattr(member.statistics.latest, name) for name in stat_names(member.STATS)])


def assert_same_state(single: Any, member: Any) -> None:
    own, row = single.state_dict(), member.state_dict()
    assert own.keys() == row.keys()
    for key, value in own.items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(row[key], value, rtol=1e-4, atol=1e-5, msg=key)
    for own_optim, row_optim in zip(own["_optimizers"], row["_optimizers"], strict=True):
        assert own_optim["state"].keys() == row_optim["state"].keys()
        for param, state in own_optim["state"].items():
            for key, value in state.items():
                torch.testing.assert_close(row_optim["state"][param][key], value, rtol=1e-4, atol=1e-5, msg=key)


def batched_and_separate(name: str, updates: int) -> tuple[SeedBatch, list[Any], Any, list[torch.Tensor]]:
    """A seed batch and S separate runs trained `updates` updates on the same rows and noise, compared
    update by update."""
    buffer = buffer_for(name)
    batched = members(name)
    separate = [copy.deepcopy(member) for member in batched]
    batch = SeedBatch(batched, randomness="same")
    batch.stacked.statistics_interval = 1
    size = batch.stacked.staged(buffer).size if name != "discrete_cql" else len(batch.stacked.staged(buffer))
    rows = [torch.randint(size, (SEEDS, BATCH), generator=torch.Generator().manual_seed(k)) for k in range(updates)]
    fix_draws(batch.stacked, buffer, rows)
    with policy_within_training_step(batch.stacked.policy):
        per_update = []
        for update in range(updates):
            torch.manual_seed(100 + update)
            batch.stacked.update(buffer, BATCH)
            per_update.append([member_figures(member) for member in batched])
    for seed, single in enumerate(separate):
        single.statistics_interval = 1
        fix_draws(single, buffer, [r[seed] for r in rows])
        own = train(single, buffer, updates)
        np.testing.assert_allclose(np.array([u[seed] for u in per_update]), np.array(own), rtol=1e-4, atol=1e-5)
    return batch, separate, buffer, rows


@pytest.mark.parametrize("name", list(BUILDERS))
def test_seeds_batched_give_what_separate_runs_give(name: str) -> None:
    """Every update's figures, then every weight and every optimiser moment, of each seed."""
    batch, separate, _, _ = batched_and_separate(name, updates=5)
    for single, member in zip(separate, batch.members, strict=True):
        assert_same_state(single, member)
    # the seeds really differ: distinct weights from distinct initialisations
    first, second = (next(member.policy.parameters()) for member in batch.members[:2])
    assert not torch.allclose(first, second)


@pytest.mark.parametrize("name", ["cql_sac", "td3_bc", "discrete_cql"])
def test_a_members_checkpoint_resumes_as_a_single_run(name: str) -> None:
    """A member's state_dict loads into a freshly built single algorithm, which then trains on exactly as
    the separate run with that seed does."""
    batch, separate, buffer, _ = batched_and_separate(name, updates=3)
    seed = 1
    resumed = BUILDERS[name]()
    resumed.load_state_dict(batch.members[seed].state_dict())
    rows = [torch.randint(100, (BATCH,), generator=torch.Generator().manual_seed(50 + k)) for k in range(3)]
    for algo in (resumed, separate[seed]):
        algo.statistics_interval = 1
        fix_draws(algo, buffer, rows)
    np.testing.assert_allclose(train(resumed, buffer, 3, 7), train(separate[seed], buffer, 3, 7), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cql_sac", "iql"])
def test_a_batched_run_resumes_exactly(name: str) -> None:
    """Members saved mid-run and loaded into freshly built ones stack into a batch that trains on as the
    uninterrupted batch does."""
    buffer = buffer_for(name)
    original = SeedBatch(members(name), randomness="same")
    rows = [torch.randint(600, (SEEDS, BATCH), generator=torch.Generator().manual_seed(k)) for k in range(6)]
    fix_draws(original.stacked, buffer, rows)
    with policy_within_training_step(original.stacked.policy):
        for update in range(3):
            torch.manual_seed(100 + update)
            original.stacked.update(buffer, BATCH)
    saved = [member.state_dict() for member in original.members]
    restored = members(name)
    for member, state in zip(restored, saved, strict=True):
        member.load_state_dict(state)
    resumed = SeedBatch(restored, randomness="same")
    fix_draws(resumed.stacked, buffer, rows[3:])
    for batch in (original, resumed):
        with policy_within_training_step(batch.stacked.policy):
            for update in range(3, 6):
                torch.manual_seed(100 + update)
                batch.stacked.update(buffer, BATCH)
    for first, second in zip(original.members, resumed.members, strict=True):
        assert_same_state(first, second)


def test_a_diverged_seed_is_reported_and_leaves_while_the_others_train_on() -> None:
    buffer = narrow_band_buffer(600)
    batched = members("td3_bc")
    separate = [copy.deepcopy(member) for member in batched]
    with torch.no_grad():
        next(batched[1].actor.parameters()).fill_(float("nan"))
    batch = SeedBatch(batched, randomness="same")
    batch.stacked.statistics_interval = 2
    rows = [torch.randint(600, (SEEDS, BATCH), generator=torch.Generator().manual_seed(k)) for k in range(2)]
    rows += [torch.randint(600, (SEEDS - 1, BATCH), generator=torch.Generator().manual_seed(k)) for k in range(2, 4)]
    fix_draws(batch.stacked, buffer, rows)
    with policy_within_training_step(batch.stacked.policy):
        for update in range(2):
            torch.manual_seed(100 + update)
            batch.stacked.update(buffer, BATCH)
        assert set(batch.stacked.statistics.diverged) == {1}
        assert "actor_loss nan" in batch.stacked.statistics.diverged[1]
        batch.remove(batched[1])
        for update in range(2, 4):
            torch.manual_seed(100 + update)
            batch.stacked.update(buffer, BATCH)
    assert batch.size == 2 and batched[1].batched_in is None
    for seed, kept in ((0, 0), (2, 1)):
        single = separate[seed]
        fix_draws(single, buffer, [r[kept if k >= 2 else seed] for k, r in enumerate(rows)])
        train(single, buffer, 4)
        assert_same_state(single, batch.members[kept])


def test_members_must_be_one_algorithm_with_one_config() -> None:
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="one config"):
        SeedBatch([BUILDERS["td3_bc"](), TD3BC.build(*SPACES, TD3BCConfig(hidden_sizes=[16, 16], alpha=1.0))])
    with pytest.raises(ValueError, match="one algorithm"):
        SeedBatch([BUILDERS["td3_bc"](), BUILDERS["bc"]()])


def test_a_member_does_not_train_alone() -> None:
    batch = SeedBatch(members("bc", 2))
    with policy_within_training_step(batch.members[0].policy), pytest.raises(RuntimeError, match="stacked copy"):
        batch.members[0].update(narrow_band_buffer(100), BATCH)


@pytest.mark.usefixtures("cpu_compiler")
def test_compiled_batched_losses_give_the_eager_updates() -> None:
    """The path a CUDA capture takes: the vmapped losses and the stacked optimiser steps fused by
    torch.compile (here on a CPU), each seed's update as the eager batch's, to compiler rounding."""
    import torch._dynamo
    import torch._inductor.config

    torch._dynamo.reset()
    buffer = narrow_band_buffer(600)
    eager = SeedBatch(members("bc", 2), randomness="same")
    compiled = SeedBatch(members("bc", 2), randomness="same")
    compiled.stacked._compile_update()
    rows = [torch.randint(300, (2, BATCH), generator=torch.Generator().manual_seed(k)) for k in range(3)]
    with torch._inductor.config.patch(fallback_random=True):
        for batch in (eager, compiled):
            fix_draws(batch.stacked, buffer, rows)
            with policy_within_training_step(batch.stacked.policy):
                for update in range(3):
                    torch.manual_seed(100 + update)
                    batch.stacked.update(buffer, BATCH)
    assert compiled._compiled_losses is not None
    for first, second in zip(eager.members, compiled.members, strict=True):
        for (name, value), other in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(other, value, rtol=1e-4, atol=1e-5, msg=name)
    torch._dynamo.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("name", ["cql_sac", "td3_bc", "iql", "discrete_cql"])
@pytest.mark.parametrize("compiled", [False, True], ids=["captured", "captured-compiled"])
def test_a_captured_batch_gives_the_eager_batchs_updates(name: str, compiled: bool) -> None:
    """On CUDA the batched update is one captured graph (one per phase of a delayed actor), with its
    vmapped losses compiled: each seed's weights as the eager batch's, drawing the same rows and noise."""
    import torch._inductor.config

    buffer = buffer_for(name)
    batches = []
    for capture in (True, False):
        built = [member.to("cuda") for member in members(name, 2)]
        batch = SeedBatch(built)
        batch.stacked.capture, batch.stacked.compile_update = capture, compiled
        batch.stacked.statistics_interval = 1
        batch.stacked.plan(12)
        with torch._inductor.config.patch(fallback_random=True), policy_within_training_step(batch.stacked.policy):
            torch.manual_seed(5)
            for _ in range(12):
                batch.stacked.update(buffer, BATCH)
        batches.append(batch)
    captured, eager = batches
    assert any(recording.captured for recording in captured.stacked._captured.values())
    tolerance = (1e-3, 1e-4) if compiled else (1e-4, 1e-5)
    for first, second in zip(captured.members, eager.members, strict=True):
        for (key, value), other in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(value, other, rtol=tolerance[0], atol=tolerance[1], msg=key)
