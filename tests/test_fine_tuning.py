"""Online fine-tuning after offline training (`--online-steps`): the online transitions prepared exactly as
the offline ones, each batch drawn from both as CORL draws it, the losses' online settings (CQL's weight,
Cal-QL's calibration off), IQL's exploration, and the programs: one run folder, two phases, resumed
exactly in either, refused in one line where it cannot work."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_engine_paths_of_new_algorithms import inductor_draws_with_torch  # noqa: F401  (a fixture)
from test_presets import ANTMAZE, assert_loads_as_written
from tianshou.data import Batch, ReplayBuffer
from tianshou.utils.torch_utils import policy_within_training_step

from conftest import REPO_ROOT, run_in_process
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.training_stats import stat_names
from offline_rl.cli import d4rl_cql, d4rl_iql
from offline_rl.cli.d4rl_cql import config_from_args
from offline_rl.core.errors import OfflineRLError
from offline_rl.data import set_action_units
from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer

OBS, ACT = 2, 1
OFFLINE_ROWS = 6
OBS_SPACE = gym.spaces.Box(-50, 50, (OBS,), np.float32)
ACT_SPACE = gym.spaces.Box(-2, 2, (ACT,), np.float32)  # env units: the offline data's actions are scaled into [-1, 1]


def offline_buffer() -> ReplayBuffer:
    """Six transitions in two episodes, observations around +10, actions in env units, rewards 0..5."""
    buffer = ReplayBuffer(OFFLINE_ROWS)
    for k in range(OFFLINE_ROWS):
        buffer.add(
            Batch(
                obs=np.array([10.0 + k, 12.0 - 0.5 * k], np.float32),
                act=np.array([-2.0 + 0.8 * k], np.float32),
                rew=float(k),
                terminated=k == 2,
                truncated=k == OFFLINE_ROWS - 1,
                obs_next=np.array([11.0 + k, 11.5 - 0.5 * k], np.float32),
                info={},
            )
        )
    set_action_units(buffer, "env")
    return buffer


def online_replay(rows: int, capacity: int) -> NullCheckedVectorReplayBuffer:
    """`rows` env steps of one env, as the collector adds them: observations around −10, actions in the
    policy's box, a terminal at the second step and a time-out at the third."""
    replay = NullCheckedVectorReplayBuffer(capacity, 1)
    for k in range(rows):
        replay.add(
            Batch(
                obs=np.array([[-10.0 - k, 3.0 * k]], np.float32),
                act=np.array([[0.9 - 0.4 * k]], np.float32),
                rew=np.array([100.0 + k]),
                terminated=np.array([k == 1]),
                truncated=np.array([k == 2]),
                obs_next=np.array([[-11.0 - k, 3.0 * k + 1]], np.float32),
                info=Batch(),
            ),
            buffer_ids=[0],
        )
    return replay


def tiny_cql(device: str = "cpu", **overrides) -> CQLSAC:
    settings = {
        "actor_hidden_sizes": [4],
        "critic_layers": 1,
        "cql_n_actions": 2,
        "reward_scale": 2.0,
        "reward_bias": -1.0,
        **overrides,
    }
    return CQLSAC.build(OBS_SPACE, ACT_SPACE, CQLSACConfig(**settings), device=device)


def fine_tuned(algorithm, rows: int, capacity: int, mixing_ratio: float | None):
    algorithm.start_fine_tuning(offline_buffer(), capacity, mixing_ratio)
    algorithm.fine_tuning.take_new(online_replay(rows, capacity), algorithm.preparation())
    return algorithm.fine_tuning


def rows_of(transitions) -> set[tuple[float, ...]]:
    """Each row of a batch as one tuple of its columns, to tell where it came from."""
    columns = [column.reshape(len(column), -1) for column in transitions[:5]]
    return {tuple(np.round(row, 5)) for row in torch.cat(columns, dim=1).numpy()}


def test_online_transitions_are_prepared_as_the_offline_data_was() -> None:
    algorithm = tiny_cql()
    data = fine_tuned(algorithm, rows=3, capacity=5, mixing_ratio=0.5)
    normalizer = algorithm.normalizer
    assert bool(normalizer.fitted)  # fitted on the offline data, once
    raw = online_replay(3, 5)[np.arange(3)]
    mean, std = normalizer.mean.numpy(), normalizer.std.numpy()
    online = data.online
    assert online.size == 3 and float(online.count) == 3.0
    np.testing.assert_allclose(online.obs[:3].numpy(), (raw.obs - mean) / std, rtol=1e-5)
    np.testing.assert_allclose(online.obs_next[:3].numpy(), (raw.obs_next - mean) / std, rtol=1e-5)
    np.testing.assert_allclose(online.act[:3].numpy(), raw.act)  # already in the policy's box: not rescaled
    np.testing.assert_allclose(online.rew[:3].numpy(), 2.0 * raw.rew - 1.0)  # the offline scale and bias
    # the terminal stops bootstrapping; the time-out does not
    np.testing.assert_array_equal(online.not_terminated[:3].numpy(), [1.0, 0.0, 1.0])
    assert not online.obs[3:].any()  # rows not yet collected stay empty
    # the offline data's actions were in env units, scaled into the box: the two agree on units
    assert float(data.offline.act.abs().max()) <= 1.0


def test_new_transitions_are_copied_once_and_the_capacity_is_kept() -> None:
    algorithm = tiny_cql()
    data = fine_tuned(algorithm, rows=2, capacity=3, mixing_ratio=0.5)
    replay = online_replay(3, 3)
    data.take_new(replay, algorithm.preparation())
    data.take_new(replay, algorithm.preparation())  # nothing new
    assert data.online.size == 3 and data.read == 3
    np.testing.assert_allclose(data.online.rew.numpy(), 2.0 * np.array([100.0, 101.0, 102.0]) - 1.0)
    with pytest.raises(ValueError, match="more than the 3"):
        data.online.extend(data.online.take(torch.tensor([0])))


def test_a_mixing_ratio_draws_its_share_from_the_offline_data_and_the_rest_online() -> None:
    algorithm = tiny_cql()
    data = fine_tuned(algorithm, rows=3, capacity=8, mixing_ratio=0.25)
    offline = rows_of(data.offline.take(torch.arange(OFFLINE_ROWS)))
    online = rows_of(data.online.take(torch.arange(3)))  # the filled rows only
    batch = data.sample(10)
    assert batch.mc_return is None
    first, rest = rows_within(batch, slice(0, 2)), rows_within(batch, slice(2, 10))
    assert first <= offline  # int(10 · 0.25) = 2 offline rows, CORL's rounding
    assert rest <= online and len(rest) > 1


def rows_within(batch, rows: slice) -> set[tuple[float, ...]]:
    return rows_of(type(batch)(*(column[rows] for column in batch[:5])))


def test_without_a_ratio_rows_are_drawn_alike_from_both_as_from_one_buffer() -> None:
    torch.manual_seed(0)
    data = fine_tuned(tiny_cql(), rows=3, capacity=8, mixing_ratio=None)
    offline = rows_of(data.offline.take(torch.arange(OFFLINE_ROWS)))
    online = rows_of(data.online.take(torch.arange(3)))
    batch = data.sample(30_000)
    rows = torch.cat([column.reshape(len(column), -1) for column in batch[:5]], dim=1).numpy()
    seen = [tuple(np.round(row, 5)) for row in rows]
    assert set(seen) <= offline | online  # never an empty online row
    share = np.mean([row in offline for row in seen])
    assert share == pytest.approx(OFFLINE_ROWS / (OFFLINE_ROWS + 3), abs=0.02)
    assert set(seen) == offline | online  # every row can be drawn


def test_cql_fine_tunes_with_its_online_weight_and_without_calibration() -> None:
    algorithm = tiny_cql(cql_weight=5.0, online_cql_weight=0.5, calibrated=True, num_critics=2)
    data = fine_tuned(algorithm, rows=3, capacity=4, mixing_ratio=0.5)
    assert (algorithm.config.cql_weight, algorithm.config.calibrated) == (0.5, False)
    torch.manual_seed(0)
    losses = algorithm.compute_losses(data.sample(8))  # no Monte-Carlo returns online: none needed now
    figures = losses.figures
    # the critics' loss: TD + w_online · Σ_e gap_e, the figure being the mean over the two critics
    expected = figures["td_loss"] + 0.5 * 2 * figures["cql_gap"]
    assert float(figures["critic_loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert tiny_cql(cql_weight=5.0).config.online_cql_weight is None  # none: the offline weight stays
    kept = tiny_cql(cql_weight=5.0)
    fine_tuned(kept, rows=1, capacity=2, mixing_ratio=None)
    assert kept.config.cql_weight == 5.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("compiled", [False, True], ids=["captured", "captured-compiled"])
def test_captured_fine_tuning_updates_give_the_eager_ones(compiled: bool, request: pytest.FixtureRequest) -> None:
    """The update stays one captured graph while the online part fills: each update copies the new env step
    in, outside the graph, and the replayed draws read it."""
    if compiled:
        request.getfixturevalue("inductor_draws_with_torch")
    torch.manual_seed(0)
    captured = tiny_cql("cuda")
    eager = copy.deepcopy(captured)
    captured.capture, eager.capture = True, False
    captured.compile_update = compiled
    runs = []
    for algorithm in (captured, eager):
        algorithm.start_fine_tuning(offline_buffer(), 8, 0.5)
        algorithm.statistics_interval = 1
        torch.manual_seed(5)
        with policy_within_training_step(algorithm.policy):
            stats = [algorithm.update(online_replay(steps, 8), 16) for steps in range(1, 9)]  # one env step each
        runs.append([[getattr(each, name) for name in stat_names(algorithm.STATS)] for each in stats])
    tolerance = {"rtol": 1e-3, "atol": 1e-4} if compiled else {"rtol": 1e-4, "atol": 1e-5}
    np.testing.assert_allclose(np.array(runs[0]), np.array(runs[1]), **tolerance)
    for name, value in captured.state_dict().items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(value, eager.state_dict()[name], msg=name, **tolerance)
    assert captured.update_path().startswith("updates: captured") and len(captured._captured) == 1
    assert all(recording.captured for recording in captured._captured.values())


def test_fine_tuning_refuses_n_step_returns() -> None:
    from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig

    algorithm = TD3BC.build(OBS_SPACE, ACT_SPACE, TD3BCConfig(n_step=3))
    with pytest.raises(ValueError, match="n-step"):
        algorithm.start_fine_tuning(offline_buffer(), 4, None)


def test_iqls_gaussian_actor_explores_around_its_mean_and_evaluates_at_it() -> None:
    algorithm = IQL.build(OBS_SPACE, ACT_SPACE, IQLConfig(hidden_sizes=[4], normalize_obs=False))
    with torch.no_grad():
        algorithm.actor.log_std.fill_(math.log(0.05))
    obs = np.tile(np.array([[0.3, -0.2]], np.float32), (4000, 1))
    mean = torch.tanh(algorithm.actor.net(torch.as_tensor(obs[:1]))).item()
    policy = algorithm.policy
    evaluated = policy(Batch(obs=obs[:3], info={})).act
    np.testing.assert_allclose(evaluated.detach().numpy(), mean, rtol=1e-6)  # the mean, when evaluating
    with policy_within_training_step(policy):
        drawn = policy(Batch(obs=obs, info={})).act.detach().numpy()
    assert drawn.min() >= -1.0 and drawn.max() <= 1.0
    assert drawn.mean() == pytest.approx(mean, abs=0.005)  # N(tanh f(s), σ²), not a squashed draw around f(s)
    assert drawn.std() == pytest.approx(0.05, rel=0.1)


def test_bad_fine_tuning_flags_are_one_line_naming_the_flag() -> None:
    with pytest.raises(OfflineRLError, match=r"--online-steps 300: .*--num-seeds"):
        config_from_args(["--online-steps", "300", "--num-seeds", "2"])
    with pytest.raises(OfflineRLError, match=r"--mixing-ratio 1.5"):
        config_from_args(["--online-steps", "300", "--mixing-ratio", "1.5"])
    with pytest.raises(OfflineRLError, match=r"--online-steps 250: expected a multiple of --online-eval-interval 100"):
        config_from_args(["--online-steps", "250", "--online-eval-interval", "100"])
    config = config_from_args(["--online-steps", "300"])  # fewer steps than an interval: one evaluation at the end
    assert (config.finetune.epochs, config.finetune.eval_interval) == (1, 300)


TINY = [
    "--task", "Hopper-v4", "--dataset-size", "1500", "--step-per-epoch", "15", "--test-num", "1",
    "--hidden-sizes", "16", "--critic-layers", "1", "--cql-n-actions", "3", "--batch-size", "32", "--epoch", "1",
    "--threads", "1", "--online-eval-interval", "150",
]  # fmt: skip


def evaluations(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if "evaluation" in line and ("return" in line)]


def summary_of(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def only_run(logdir: Path) -> Path:
    (folder,) = (logdir / "Hopper-v4" / "cql" / "0").iterdir()
    return folder


def test_one_folder_two_phases_and_every_way_of_getting_there_trains_alike(tmp_path: Path) -> None:
    straight = run_in_process("examples/d4rl_cql.py", *TINY, "--logdir", "a", "--online-steps", "300", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]
    lines = evaluations(straight.stdout)
    offline_last = next(line for line in lines if line.startswith("evaluation 1 "))
    at_switch = next(line for line in lines if "fine-tuning: evaluation before training" in line)
    assert offline_last.split(": ", 1)[1] == at_switch.split(": ", 2)[2]  # the switch evaluates the offline policy
    folder = only_run(tmp_path / "a")
    summary = summary_of(folder)
    assert summary["env_steps"] == 300 and summary["fine_tuning"]["offline_updates"] == 15
    assert summary["fine_tuning"]["offline_last"]["epoch"] == 1 and summary["last"]["epoch"] == 2
    assert (folder / "replay.hdf5").is_file() and (folder / "policy_last.pth").is_file()
    tuned = [line for line in lines if line.startswith("fine-tuning: evaluation 2 ")]

    # offline first, fine-tuned later from its finished checkpoint, stopped after one fine-tuning epoch and
    # resumed: the same evaluations, digit for digit
    first = run_in_process("examples/d4rl_cql.py", *TINY, "--logdir", "b", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    checkpoint = str(only_run(tmp_path / "b") / "checkpoint.pth")
    half = run_in_process("examples/d4rl_cql.py", "--resume-path", checkpoint, "--online-steps", "150", cwd=tmp_path)
    assert half.returncode == 0, half.stderr[-2000:]
    assert "already trained" not in half.stdout
    rest = run_in_process("examples/d4rl_cql.py", "--resume-path", checkpoint, "--online-steps", "300", cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr[-2000:]
    assert "replay: restored 150 transitions" in rest.stdout
    assert [line for line in evaluations(rest.stdout) if line.startswith("fine-tuning: evaluation 2 ")] == tuned
    assert summary_of(only_run(tmp_path / "b"))["last"] == summary["last"]
    again = run_in_process("examples/d4rl_cql.py", "--resume-path", checkpoint, "--online-steps", "300", cwd=tmp_path)
    assert again.returncode == 0 and "already fine-tuned for its 300 env steps; nothing to do" in again.stdout


def test_iql_fine_tunes_online_too(tmp_path: Path) -> None:
    args = [
        "--task", "Hopper-v4", "--dataset-size", "1500", "--step-per-epoch", "15", "--test-num", "1",
        "--hidden-sizes", "16", "--batch-size", "32", "--epoch", "1", "--threads", "1", "--online-steps", "100",
    ]  # fmt: skip
    done = run_in_process("examples/d4rl_iql.py", *args, "--logdir", "log", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "done: Hopper-v4 fine-tuning: 100 env steps" in done.stdout
    (folder,) = (tmp_path / "log" / "Hopper-v4" / "iql" / "0").iterdir()
    assert summary_of(folder)["fine_tuning"]["offline_updates"] == 15


FINE_TUNING_DATASETS = [*ANTMAZE, *(f"{hand}-cloned-v1" for hand in ("pen", "door", "hammer", "relocate"))]
FINE_TUNING_FOLDERS = {
    "cql": d4rl_cql.config_from_args,
    "cal_ql": d4rl_cql.config_from_args,
    "iql": d4rl_iql.config_from_args,
}
FINE_TUNING_PRESETS = [
    (folder, path)
    for folder in FINE_TUNING_FOLDERS
    for path in sorted((REPO_ROOT / "configs" / "finetune" / folder).glob("*.yaml"))
]


@pytest.mark.parametrize("folder", FINE_TUNING_FOLDERS)
def test_there_is_one_fine_tuning_preset_per_corl_dataset(folder: str) -> None:
    stems = sorted(path.stem for path in (REPO_ROOT / "configs" / "finetune" / folder).glob("*.yaml"))
    assert stems == sorted(FINE_TUNING_DATASETS)


@pytest.mark.parametrize(("folder", "path"), FINE_TUNING_PRESETS, ids=lambda value: getattr(value, "stem", value))
def test_a_fine_tuning_preset_loads_with_exactly_the_values_in_its_file(folder: str, path: Path) -> None:
    assert assert_loads_as_written(path, FINE_TUNING_FOLDERS[folder]).dataset == path.stem


@pytest.mark.parametrize(("folder", "path"), FINE_TUNING_PRESETS, ids=lambda value: getattr(value, "stem", value))
def test_the_fine_tuning_presets_hold_corls_values(folder: str, path: Path) -> None:
    config = FINE_TUNING_FOLDERS[folder](["--config", str(path)])
    run, tune, algo = config.run, config.finetune, config.algorithm
    maze = path.stem.startswith("antmaze")
    every = 50_000 if maze else 5_000
    assert (run.epoch * run.step_per_epoch, tune.online_steps) == (
        1_000_000,
        1_000_000,
    )  # offline and online iterations
    assert (run.step_per_epoch, tune.online_eval_interval, run.test_num) == (every, every, 100 if maze else 10)
    assert (run.batch_size, tune.online_updates_per_step) == (256, 1.0)
    assert tune.mixing_ratio == (0.5 if folder == "cal_ql" else None)  # Cal-QL mixes; CQL and IQL keep one buffer
    if folder == "iql":
        assert (algo.expectile, algo.temperature) == ((0.9, 10.0) if maze else (0.8, 3.0))
        assert (algo.normalize_obs, algo.reward_bias) == (True, -1.0 if maze else 0.0)
        return
    assert algo.calibrated == (folder == "cal_ql") and algo.online_cql_weight == algo.cql_weight
    assert (algo.cql_weight, algo.with_lagrange) == ((5.0, True) if maze else (1.0, False))
    assert (algo.clip_diff_min, algo.max_target_backup, algo.normalize_obs) == (-200.0, True, False)
    assert (algo.actor_lr, algo.critic_lr, algo.lagrange_multiplier_init) == (1e-4, 3e-4, pytest.approx(math.e))
    layers = {"cql": 5 if maze else 2, "cal_ql": 4 if maze else 3}[folder]
    if folder == "cal_ql" and path.stem == "antmaze-umaze-v2":  # the file CORL revised last
        layers = 5
    assert algo.critic_layers == layers
    scaled = maze and (folder == "cql" or path.stem == "antmaze-umaze-v2")
    assert (algo.reward_scale, algo.reward_bias) == ((10.0, -5.0) if scaled else (1.0, 0.0))
    assert algo.calibration_failure_reward == (0.0 if folder == "cal_ql" and scaled else None)


def test_a_fine_tuning_run_stopped_between_two_env_steps_goes_on_as_it_never_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM inside a fine-tuning epoch: the env step and update under way end, the checkpoint keeps the
    online replay and the env's place in its episode, and the resume ends where the run never stopped ends."""
    import os
    import signal

    from offline_rl.algorithms.base import CountedOfflineAlgorithm

    flags = [*TINY, "--online-steps", "300"]
    straight = run_in_process("examples/d4rl_cql.py", *flags, "--logdir", "straight", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr[-2000:]
    update, calls = CountedOfflineAlgorithm.update, []

    def stopped_online(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 15 + 40:  # the 40th env step of the first fine-tuning epoch
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(CountedOfflineAlgorithm, "update", stopped_online)
    stopped = run_in_process("examples/d4rl_cql.py", *flags, "--logdir", "stopped", cwd=tmp_path)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    checkpoint = only_run(tmp_path / "stopped") / "checkpoint.pth"
    kept = torch.load(checkpoint, weights_only=True)
    assert (kept["epoch"], kept["epoch_steps_done"], "fine_tuning" in kept) == (0, 40, True)
    monkeypatch.setattr(CountedOfflineAlgorithm, "update", update)
    resumed = run_in_process("examples/d4rl_cql.py", "--resume-path", str(checkpoint), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "replay: restored 40 transitions" in resumed.stdout
    tuned = [line for line in evaluations(straight.stdout) if line.startswith("fine-tuning: evaluation ")]
    assert [line for line in evaluations(resumed.stdout) if line.startswith("fine-tuning: evaluation ")] == tuned[1:]
    assert summary_of(only_run(tmp_path / "stopped"))["last"] == summary_of(only_run(tmp_path / "straight"))["last"]


def test_a_sweep_fine_tunes_each_seed_apart_and_batches_the_rest() -> None:
    from offline_rl.sweep.seed_batches import seed_batches
    from offline_rl.sweep.spec import SweepSpec

    preset = str(REPO_ROOT / "configs" / "finetune" / "cal_ql" / "door-cloned-v1.yaml")
    tuned = SweepSpec(name="tuned", example="d4rl_cql", config=preset, grid={"seed": [0, 1, 2]}).trials()
    assert all(trial.alone for trial in tuned) and len(seed_batches(tuned)) == 3  # the preset fine-tunes
    grid = {"seed": [0, 1], "online_steps": [0, 1000]}
    trials = SweepSpec(name="mixed", example="d4rl_cql", fixed={"online_eval_interval": 500}, grid=grid).trials()
    batches = [[dict(trial.values)["online_steps"] for trial in batch] for batch in seed_batches(trials)]
    assert sorted(batches) == [[0, 0], [1000], [1000]]


def test_the_run_counts_as_ended_only_once_fine_tuning_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop during fine-tuning leaves no `summary.json` (a sweep resumes the trial, a results table counts
    it unfinished); the offline phase's summary is kept beside it."""
    import os
    import signal

    from offline_rl.algorithms.base import CountedOfflineAlgorithm

    update, calls = CountedOfflineAlgorithm.update, []

    def stopped_online(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 15 + 10:
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(CountedOfflineAlgorithm, "update", stopped_online)
    stopped = run_in_process("examples/d4rl_cql.py", *TINY, "--online-steps", "150", "--logdir", "log", cwd=tmp_path)
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    folder = only_run(tmp_path / "log")
    assert not (folder / "summary.json").exists()
    offline = json.loads((folder / "summary-offline.json").read_text())
    assert offline["total_updates"] == 15 and offline["last"]["epoch"] == 1


def test_a_finished_offline_run_fine_tunes_from_its_final_weights_as_from_its_checkpoint(tmp_path: Path) -> None:
    import shutil

    first = run_in_process("examples/d4rl_cql.py", *TINY, "--logdir", "c", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    shutil.copytree(tmp_path / "c", tmp_path / "d")
    tuned = {}
    for logdir, file in (("c", "checkpoint.pth"), ("d", "policy_last.pth")):
        path = str(only_run(tmp_path / logdir) / file)
        done = run_in_process("examples/d4rl_cql.py", "--resume-path", path, "--online-steps", "150", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        tuned[file] = [line for line in evaluations(done.stdout) if line.startswith("fine-tuning: evaluation 1 ")]
    assert tuned["checkpoint.pth"] == tuned["policy_last.pth"] and tuned["checkpoint.pth"]
    for logdir in ("c", "d"):  # each in its own folder, the copy's too (its summary names the original's)
        assert summary_of(only_run(tmp_path / logdir))["env_steps"] == 150
        assert (only_run(tmp_path / logdir) / "summary-offline.json").is_file()
    # the best weights are not where the run ended, and training alone goes on from the checkpoint only
    best = str(only_run(tmp_path / "c") / "policy.pth")
    for flags in (["--online-steps", "150"], ["--epoch", "3"]):
        refused = run_in_process("examples/d4rl_cql.py", "--resume-path", best, *flags, cwd=tmp_path)
        assert refused.returncode == 2 and "continue training from the checkpoint.pth beside it" in refused.stderr
    last = str(only_run(tmp_path / "c") / "policy_last.pth")
    refused = run_in_process("examples/d4rl_cql.py", "--resume-path", last, "--epoch", "3", cwd=tmp_path)
    assert refused.returncode == 2 and "the weights of one evaluation" in refused.stderr
