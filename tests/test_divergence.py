"""A diverged run stops with one line instead of training on NaN weights, and keeps its last sound
checkpoint: the statistics window's figures and the weights about to be checkpointed are checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from test_cql_sac_training import build, narrow_band_buffer, small_config
from test_d4rl_cql_example import TINY, run_example
from test_discrete_cql import episode_buffer, tiny_algorithm
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.training_stats import non_finite_tensors, require_finite_statistics
from offline_rl.core.errors import OfflineRLError, TrainingDiverged
from offline_rl.results.command import write_results
from offline_rl.runs.files import RUN_DIVERGED_FILE


def test_a_window_with_a_nan_or_an_infinity_stops_training_and_names_them() -> None:
    require_finite_statistics(["loss", "q"], [1.0, -2.5], 1, 100)  # finite: nothing happens
    with pytest.raises(TrainingDiverged, match=r"training diverged: q nan \(mean of updates 101-200\)"):
        require_finite_statistics(["loss", "q"], [1.0, math.nan], 101, 200)
    with pytest.raises(TrainingDiverged, match=r"loss inf \(mean of update 7\)"):
        require_finite_statistics(["loss", "q"], [math.inf, 0.0], 7, 7)
    names = [f"s{i}" for i in range(5)]
    with pytest.raises(TrainingDiverged, match=r": s0 -inf, s1 -inf, s2 -inf and 2 more \("):
        require_finite_statistics(names, [-math.inf] * 5, 1, 1)
    assert issubclass(TrainingDiverged, OfflineRLError)  # one line and exit 2 from the commands; sweeps do not retry


def test_cql_sac_stops_at_the_end_of_the_window_its_losses_turn_non_finite() -> None:
    buffer = narrow_band_buffer()
    algo = build(small_config(reward_scale=1e38))  # rewards of float32's order: the squared TD error overflows
    algo.statistics_interval = 3
    algo.process_buffer(buffer)
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 32), algo.update(buffer, 32)  # inside the window: nothing read yet
        with pytest.raises(TrainingDiverged, match=r"training diverged: .*td_loss.*\(mean of updates 1-3\)"):
            algo.update(buffer, 32)


def test_discrete_cql_stops_on_a_nan_weight() -> None:
    buffer = episode_buffer()
    algo = tiny_algorithm()
    algo.process_buffer(buffer)
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 4)  # sound
        with torch.no_grad():
            next(algo.model.parameters())[0].fill_(math.nan)
        with pytest.raises(TrainingDiverged, match=r"loss nan.*\(mean of update 2\)"):
            algo.update(buffer, 4)


def test_weights_holding_nan_or_plus_inf_are_named_and_minus_inf_log_alpha_is_not() -> None:
    algo = build(small_config(alpha=0.0, auto_alpha=False))  # α = 0 is stored as log α = −inf
    assert math.isinf(algo.log_alpha.item()) and non_finite_tensors(algo) == []
    with torch.no_grad():
        algo.critic.weights[1][0, 0] = math.nan
        algo.normalizer.std[0] = math.inf
    broken = non_finite_tensors(algo)
    assert "critic.weights.1" in broken and any(name.endswith("normalizer.std") for name in broken)
    assert not any("log_alpha" in name for name in broken)


def test_a_diverged_example_exits_2_in_one_line_and_writes_no_checkpoint(tmp_path: Path) -> None:
    result = run_example(
        *TINY, "--epoch", "2", "--log-interval", "5", "--reward-scale", "1e38", "--logdir", "log", cwd=tmp_path
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]  # after the dataset generation's progress bar
    assert result.stderr.count("error:") == 1
    assert line.startswith("error: training diverged: ") and "(mean of updates 1-5)" in line
    assert "no checkpoint was written; start again with lower learning rates" in line
    (run_dir,) = (tmp_path / "log" / "Pendulum-v1" / "cql" / "0").iterdir()
    assert not {"checkpoint.pth", "policy.pth", "policy_last.pth"} & {p.name for p in run_dir.iterdir()}
    # The results table counts the run as diverged instead of leaving it out.
    record = json.loads((run_dir / RUN_DIVERGED_FILE).read_text())
    assert record["message"] == line.removeprefix("error: ") and record["stopped_after"] == "5 updates"
    table = write_results([tmp_path / "log"], tmp_path / "results", reps=10)["table"]
    assert "| 1 (0; 1 diverged) | - | - | diverged | diverged | diverged |" in table


def test_a_run_diverging_between_windows_keeps_its_last_sound_checkpoint(tmp_path: Path) -> None:
    sound = run_example(*TINY, "--epoch", "1", "--logdir", "log", cwd=tmp_path)
    assert sound.returncode == 0, sound.stderr[-2000:]
    (run_dir,) = (tmp_path / "log" / "Pendulum-v1" / "cql" / "0").iterdir()
    checkpoint = run_dir / "checkpoint.pth"
    before = checkpoint.read_bytes(), (run_dir / "policy_last.pth").read_bytes()
    # No window closes within epoch 2 (15 updates, windows of 1000): the weights are checked as the
    # checkpoint is about to be written, and the NaN ones are not written over epoch 1's.
    diverged = run_example(
        "--resume-path", str(checkpoint), "--epoch", "2", "--reward-scale", "1e38", "--log-interval", "1000",
        cwd=tmp_path,
    )  # fmt: skip
    assert diverged.returncode == 2 and "Traceback" not in diverged.stderr
    (line,) = diverged.stderr.strip().splitlines()
    assert "hold NaN or inf after epoch 2" in line and f"{checkpoint} holds epoch 1, before it: resume from it" in line
    assert (checkpoint.read_bytes(), (run_dir / "policy_last.pth").read_bytes()) == before  # nothing NaN written
    assert (run_dir / RUN_DIVERGED_FILE).is_file()
    # ...and resuming from it with sound settings trains on, no longer a diverged run.
    resumed = run_example("--resume-path", str(checkpoint), "--epoch", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "evaluation 2 (" in resumed.stdout and not (run_dir / RUN_DIVERGED_FILE).exists()
    assert "| 1 (1) | 30 |" in write_results([tmp_path / "log"], tmp_path / "results", reps=10)["table"]
