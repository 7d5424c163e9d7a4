"""The online behaviour trainer (`examples/atari_qrdqn.py`) runs in a folder like the offline
examples: checkpoints each epoch with the replay beside them, and `--resume-path` goes on where
the run stopped (epoch, env steps and so ε, replay, evaluation numbering, best)."""

from __future__ import annotations

import shlex
from pathlib import Path

import h5py
import pytest
import torch
from tensorboard.backend.event_processing import event_accumulator

from offline_rl.cli import atari_qrdqn
from offline_rl.cli.main import run_main
from offline_rl.examples import atari_qrdqn as atari_qrdqn_program

SMALL_RUN = [
    "--task", "CartPole-v1", "--num-quantiles", "8", "--hidden-sizes", "16", "--step-per-epoch", "200",
    "--training-num", "2", "--test-num", "2", "--buffer-size", "1000", "--batch-size", "16",
]  # fmt: skip


def logged_steps(log_path: Path, tag: str) -> list[int]:
    events = event_accumulator.EventAccumulator(str(log_path))
    events.Reload()
    # Sorted: a resumed run writes a second event file, and the files' names (time, host, pid and a
    # per-process counter) need not sort in the order they were written. Once each: a resumed run
    # makes its epoch's evaluation again, logged at the same step.
    return sorted({int(item.step) for item in events.scalars.Items(tag)})


def logged_env_steps(log_path: Path) -> list[int]:
    return logged_steps(log_path, "save/env_step")


def test_a_run_resumes_at_its_epoch_and_env_step_with_its_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    first = atari_qrdqn_program.main([*SMALL_RUN, "--epoch", "1"])
    run = Path(first["log_path"]).resolve()
    assert {p.name for p in run.iterdir()} >= {"checkpoint.pth", "replay.hdf5", "policy_last.pth", "summary.json"}
    assert first["env_steps"] == first["total_env_steps"] == 200 and first["last"] is not None
    checkpoint = torch.load(run / "checkpoint.pth", weights_only=True)
    assert (checkpoint["epoch"], checkpoint["env_step"]) == (1, 200)
    assert checkpoint["target_update_counter"] == 20  # one update per 10 env steps
    capsys.readouterr()

    second = atari_qrdqn_program.main(["--resume-path", str(run / "checkpoint.pth"), "--epoch", "2"])
    out = capsys.readouterr().out
    assert Path(second["log_path"]) == run  # the same folder, no new run
    assert "replay: restored 200 transitions" in out
    assert "evaluation 1 of the resumed weights (" in out and "evaluation 2 (" in out
    assert second["env_steps"] == 200 and second["total_env_steps"] == 400
    assert logged_env_steps(run) == [200, 400]  # Tianshou's counters (and with them ε) carried on
    assert logged_steps(run, "eval/return_mean") == [20, 40]  # evaluations are plotted against updates
    resumed = torch.load(run / "checkpoint.pth", weights_only=True)
    assert resumed["epoch"] == 2 and resumed["target_update_counter"] == 40  # target copies on schedule
    with h5py.File(run / "replay.hdf5") as saved:  # the trainer kept the restored replay and added to it
        assert sum(len(saved[env]["act"]) for env in saved) == 400
    assert second["best_optimistic"]["return_mean"] >= first["best_optimistic"]["return_mean"]

    # The behaviour policy as a file for use without offline_rl: its greedy actions, checked on
    # CartPole's own observations; the run's folder is left as it was.
    files_before = {path.name: path.stat().st_mtime_ns for path in run.iterdir()}
    exported = atari_qrdqn_program.main(
        ["--resume-path", str(run / "policy_last.pth"), "--export-policy", "cartpole.pt2"]
    )
    assert exported["format"] == "torch.export program" and exported["checked_on"] == 64
    assert (
        "as torch.export program cartpole.pt2: obs float32 (batch, 4) -> action int64 (batch)"
        in capsys.readouterr().out
    )
    assert {path.name: path.stat().st_mtime_ns for path in run.iterdir()} == files_before
    program = torch.export.load(str(tmp_path / "cartpole.pt2")).module()
    assert program(torch.zeros(3, 4)).shape == (3,)


def test_without_a_saved_replay_a_resumed_run_says_it_starts_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    first = atari_qrdqn_program.main([*SMALL_RUN, "--epoch", "1", "--no-checkpoint-replay"])
    run = Path(first["log_path"])
    assert not (run / "replay.hdf5").exists() and (run / "checkpoint.pth").exists()
    capsys.readouterr()
    atari_qrdqn_program.main(["--resume-path", str(run / "checkpoint.pth"), "--epoch", "2"])
    assert "starting with an empty replay" in capsys.readouterr().out


def test_ctrl_c_says_how_far_the_run_got_and_how_to_go_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.evaluation import EvaluationReporter
    from offline_rl.runs.folder import RunFolder

    algorithm = torch.nn.Linear(2, 1)
    folder = RunFolder.open(
        algorithm, RunConfig(logdir=str(tmp_path)), lambda writer: EvaluationReporter(writer=writer),
        task="CartPole-v1", algo_name="qrdqn", saved={"config": {"task": "CartPole-v1"}},
    )  # fmt: skip
    folder.save_last(1, 200, 20)
    with pytest.raises(KeyboardInterrupt), folder.training(lambda: "123 env steps"):
        raise KeyboardInterrupt
    line = capsys.readouterr().out.strip()
    assert line == f"interrupted after 123 env steps; continue with --resume-path {folder.log_path / 'checkpoint.pth'}"
    assert not (folder.log_path / "policy_last.pth").exists()  # only a run that ended writes its last policy


def test_the_commands_it_prints_to_copy_survive_a_space_in_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.evaluation import EvaluationReporter
    from offline_rl.runs.folder import RunFolder

    logdir = tmp_path / "my runs"
    folder = RunFolder.open(
        torch.nn.Linear(2, 1), RunConfig(logdir=str(logdir)), lambda writer: EvaluationReporter(writer=writer),
        task="CartPole-v1", algo_name="qrdqn", saved={"config": {"task": "CartPole-v1"}},
    )  # fmt: skip
    folder.save_last(1, 200, 20)
    with pytest.raises(KeyboardInterrupt), folder.training(lambda: "1 env step"):
        raise KeyboardInterrupt
    resume = capsys.readouterr().out.strip().split("; continue with ")[1]
    assert shlex.split(resume) == ["--resume-path", str(folder.log_path / "checkpoint.pth")]
    folder.finish({}, "done")
    curves = capsys.readouterr().out.strip().split("; curves: ")[1]
    assert shlex.split(curves) == ["tensorboard", "--logdir", str(logdir)]


def test_in_a_log_file_the_online_trainer_prints_its_env_step_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a terminal there is no progress bar: lines like the offline trainer's `update N: R
    updates/s` show that a long epoch is moving (every minute; here at every collection step)."""
    from offline_rl.runs import update_rate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(update_rate, "LINE_INTERVAL_S", 0.0)
    atari_qrdqn_program.main([*SMALL_RUN, "--epoch", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("env step ")]
    assert lines and all(" of 200: " in line and line.endswith(" of training left") for line in lines)
    assert int(lines[-1].split()[2].rstrip(":")) == 190  # the count before the epoch's last collection


def test_epsilon_falls_linearly_over_its_env_steps_then_holds() -> None:
    config = atari_qrdqn.config_from_args(
        ["--task", "CartPole-v1", "--eps-train", "0.9", "--eps-train-final", "0.1", "--eps-decay-steps", "400"]
    )
    schedule = [atari_qrdqn.training_epsilon(config, step) for step in (0, 100, 200, 400, 10_000)]
    assert schedule == pytest.approx([0.9, 0.7, 0.5, 0.1, 0.1])


def test_the_trainer_sets_epsilon_by_the_env_steps_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    set_to: list[float] = []
    original = atari_qrdqn.training_epsilon

    def recorded(config: atari_qrdqn.AtariQRDQNConfig, env_step: int) -> float:
        set_to.append(original(config, env_step))
        return set_to[-1]

    monkeypatch.setattr(atari_qrdqn, "training_epsilon", recorded)
    atari_qrdqn_program.main(
        [*SMALL_RUN, "--epoch", "1", "--eps-train", "1", "--eps-train-final", "0", "--eps-decay-steps", "400"]
    )
    assert set_to[0] == 1.0 and set_to[-1] == pytest.approx(1 - 190 / 400)  # the last collection starts at 190
    assert set_to == sorted(set_to, reverse=True)


def test_a_stop_mid_epoch_keeps_the_env_steps_collected_and_the_resume_finishes_the_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM between two collections: the checkpoint (and the replay beside it) keeps the env steps
    of the unfinished epoch, and the resume collects only the rest of it."""
    import os
    import signal

    from tianshou.algorithm import QRDQN

    monkeypatch.chdir(tmp_path)
    update, calls = QRDQN.update, []

    def stopped_at_the_8th(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 8:
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(QRDQN, "update", stopped_at_the_8th)
    with pytest.raises(SystemExit) as stopped:
        run_main(atari_qrdqn_program.main, [*SMALL_RUN, "--epoch", "1"])
    assert stopped.value.code == 143
    out = capsys.readouterr().out
    assert "interrupted after " in out and "continue with --resume-path " in out
    (checkpoint_path,) = Path("log").rglob("checkpoint.pth")
    checkpoint = torch.load(checkpoint_path, weights_only=True)
    done = checkpoint["epoch_steps_done"]
    assert checkpoint["epoch"] == 0 and 0 < done < 200 and checkpoint["env_step"] == done
    monkeypatch.setattr(QRDQN, "update", update)
    resumed = atari_qrdqn_program.main(["--resume-path", str(checkpoint_path)])
    assert resumed["total_env_steps"] == 200 and resumed["env_steps"] == 200 - done  # the rest of the epoch
    assert "evaluation 1 (" in capsys.readouterr().out
