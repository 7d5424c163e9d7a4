"""`examples/d4rl_cql.py` end to end on a cheap task: train, checkpoints, resume, watch, bad flags."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO_ROOT, run_in_process
from offline_rl.algorithms.export.policy_file import load_policy
from offline_rl.cli.d4rl_cql import config_from_args
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import with_checksum
from offline_rl.data import load_d4rl
from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

TINY = [
    "--task",
    "Pendulum-v1",
    "--dataset-size",
    "1500",
    "--step-per-epoch",
    "15",
    "--test-num",
    "1",
    "--hidden-sizes",
    "16",
    "--critic-layers",
    "1",
    "--cql-n-actions",
    "3",
    "--batch-size",
    "32",
]


def run_example(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_in_process("examples/d4rl_cql.py", *args, cwd=cwd)


def test_train_resume_watch_and_export(tmp_path: Path) -> None:
    first = run_example(*TINY, "--epoch", "1", "--logdir", str(tmp_path / "log"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "generating a 1500-step random-policy dataset for Pendulum-v1" in first.stdout
    summary = [line for line in first.stdout.splitlines() if line.startswith("done:")]
    assert len(summary) == 1 and ": 15 updates in " in summary[0]  # a first session: no "in all"
    # the headline is the last evaluation; the best one is there too, labelled as optimistic
    assert summary[0].index("last evaluation return") < summary[0].index("best (optimistic) return")
    (run_dir,) = (tmp_path / "log" / "Pendulum-v1" / "cql" / "0").iterdir()
    names = {p.name for p in run_dir.iterdir()}
    assert {"policy.pth", "policy_last.pth", "checkpoint.pth", "behaviour_policy.pt"} <= names
    assert any(name.startswith("events.out.tfevents") for name in names)
    assert not any(name.endswith(".part") for name in names)
    assert not {"wandb", "wandb_run.json"} & names and "W&B" not in first.stdout  # no W&B unless --logger wandb
    # the run's record names the products it used (--matmul-precision auto, resolved for its device)
    recorded = json.loads((run_dir / "run.json").read_text())["config"]["run"]["torch"]["matmul_precision"]
    assert recorded == ("high" if torch.cuda.is_available() else "highest")

    # Not on a terminal (a log file, CI): no progress-bar escape codes, and each evaluation printed once.
    assert "\x1b[" not in first.stdout + first.stderr and "\r" not in first.stdout + first.stderr
    assert first.stdout.count("evaluation 1 (") == 1 and "test_reward" not in first.stdout
    # Only trained evaluations count: policy.pth is evaluation 1's weights, never the untrained ones.
    assert "evaluation before training" in first.stdout
    first_return = float(re.search(r"evaluation 1 \(1 episode\): return (-?[\d.]+)", first.stdout).group(1))
    best = torch.load(run_dir / "policy.pth", weights_only=True)["best_evaluation"]
    assert best["return_mean"] == pytest.approx(first_return, abs=0.01)

    # An interrupted two-epoch run: its checkpoint records epoch 1 of the --epoch 2 it was started with.
    checkpoint = torch.load(run_dir / "checkpoint.pth", weights_only=True)
    checkpoint["config"]["run"]["epoch"] = 2
    del checkpoint["checksum"]
    torch.save(with_checksum(checkpoint), run_dir / "checkpoint.pth")  # edited, so sealed again
    policy_before = (run_dir / "policy.pth").read_bytes()

    # Resuming with no other flag continues that run: its task, dataset, budget and counters.
    second = run_example("--resume-path", str(run_dir / "checkpoint.pth"), "--log-interval", "2", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming the run in" in second.stdout
    assert second.stdout.count("--log-interval 2 overrides 100 of the run in") == 1  # each override, once
    assert "using the cached random-policy dataset" in second.stdout and "Pendulum-v1" in second.stdout
    assert "evaluation 1 (" not in second.stdout  # epoch 1 is not trained again
    assert "evaluation 1 of the resumed weights (" in second.stdout and "evaluation 2 (" in second.stdout
    done_line = next(line for line in second.stdout.splitlines() if line.startswith("done:"))
    assert ": 15 updates (30 in all) in " in done_line  # this session's updates, and the run's
    assert re.search(r"; training \d+ s at [\d.]+/s, evaluation \d+ s\)", done_line)  # reported apart
    summary = json.loads(next(run_dir.rglob("summary.json")).read_text())
    assert 0 < summary["evaluation_seconds"] < summary["seconds"]
    after = torch.load(run_dir / "checkpoint.pth", weights_only=True)
    assert after["epoch"] == 2 and after["gradient_step"] == 30
    second_return = float(re.search(r"evaluation 2 \(1 episode\): return (-?[\d.]+)", second.stdout).group(1))
    # The best survives the resume: replaced only by a better trained evaluation.
    best_after = torch.load(run_dir / "policy.pth", weights_only=True)["best_evaluation"]
    assert best_after["return_mean"] == pytest.approx(max(first_return, second_return), abs=0.01)
    assert ((run_dir / "policy.pth").read_bytes() == policy_before) == (second_return <= first_return)

    # Resuming the finished run again trains nothing and leaves its files as they are.
    files_before = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    third = run_example("--resume-path", str(run_dir / "checkpoint.pth"), cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"the run in {run_dir} already trained its 2 epochs (summary.json); nothing to do" in third.stdout
    assert "done:" not in third.stdout and "evaluation" not in third.stdout
    assert {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()} == files_before

    # Stopped after its last checkpoint but before its last evaluation and summary: the resume
    # trains nothing, and the evaluation of the (final) resumed weights is the summary's last one.
    (run_dir / "summary.json").unlink()
    fourth = run_example("--resume-path", str(run_dir / "checkpoint.pth"), cwd=tmp_path)
    assert fourth.returncode == 0, fourth.stderr[-2000:]
    resumed = float(
        re.search(r"evaluation 2 of the resumed weights \(1 episode\): return (-?[\d.]+)", fourth.stdout).group(1)
    )
    last = json.loads((run_dir / "summary.json").read_text())["last"]
    assert last["return_mean"] == pytest.approx(resumed, abs=0.01)
    assert f"last evaluation return {last['return_mean']:.2f}" in fourth.stdout

    watched = run_example(
        "--task",
        "Pendulum-v1",
        "--test-num",
        "2",
        "--watch",
        "--resume-path",
        str(run_dir / "policy.pth"),
        cwd=tmp_path,
    )
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert "over 2 episodes" in watched.stdout

    # The last policy as an ONNX file, read by onnxruntime alone, plays the episode --watch plays (its
    # first env seeded --seed + 10000); exporting leaves the run's folder as it was.
    files_before = {path.name: path.stat().st_mtime_ns for path in run_dir.iterdir()}
    onnx_file = tmp_path / "pendulum.onnx"
    exported = run_example(
        "--resume-path", str(run_dir / "policy_last.pth"), "--export-policy", str(onnx_file), cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert f"reading the run in {run_dir / 'policy_last.pth'} with its own settings" in exported.stdout
    assert (
        f"as ONNX {onnx_file}: obs float32 (batch, 3) -> action float32 (batch, 1); on 64 observations"
        in exported.stdout
    )
    assert {path.name: path.stat().st_mtime_ns for path in run_dir.iterdir()} == files_before
    one = run_example("--watch", "--test-num", "1", "--resume-path", str(run_dir / "policy_last.pth"), cwd=tmp_path)
    watched_return = float(re.search(r"return (-?[\d.]+)", one.stdout.splitlines()[-1]).group(1))
    import gymnasium as gym
    import onnxruntime

    policy = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    described = policy.get_modelmeta().custom_metadata_map  # the file names its task, source and env
    assert described["task"] == "Pendulum-v1" and described["source"] == str(run_dir / "policy_last.pth")
    env = gym.make(gym.envs.registration.EnvSpec.from_json(described["env_spec"]))
    assert env.spec.id == "Pendulum-v1"
    env.reset(seed=10_000)  # Tianshou seeds an env by a seeded reset; the collector's own reset follows
    obs, _ = env.reset()
    total, done = 0.0, False
    while not done:
        action = policy.run(["action"], {"obs": obs[None].astype(np.float32)})[0][0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    assert total == pytest.approx(watched_return, abs=0.006)
    with pytest.raises(OfflineRLError, match="give --watch or --export-policy, not both"):
        config_from_args(["--resume-path", str(run_dir / "policy.pth"), "--watch", "--export-policy", "p.onnx"])
    wrong = run_example("--resume-path", str(run_dir / "policy.pth"), "--export-policy", "p.pth", cwd=tmp_path)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr and not (tmp_path / "p.pth").exists()
    assert wrong.stderr.endswith(
        "error: --export-policy p.pth: expected a file name ending in .onnx (ONNX) or .pt2 (torch.export program)\n"
    )

    # The exported actor drives the collector, for medium/expert-style datasets.
    data = collect_dataset(
        CollectConfig(
            task="Pendulum-v1",
            output=tmp_path / "from_policy.hdf5",
            size=50,
            policy=str(run_dir / "behaviour_policy.pt"),
            progress=False,
        )
    )
    assert np.all(np.abs(load_d4rl(data).act) <= 2.0)


def test_bad_flags_and_mismatched_datasets_exit_2(tmp_path: Path) -> None:
    result = run_example("--task", "Pendulum-v1", "--cql-weight", "lots", cwd=tmp_path)
    assert result.returncode == 2 and "--cql-weight" in result.stderr and "Traceback" not in result.stderr
    result = run_example("--export-policy", "p.onnx", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr
        == "error: --export-policy needs --resume-path (a run's policy.pth, policy_last.pth or checkpoint.pth)\n"
    )
    cheetah = collect_dataset(CollectConfig(task="HalfCheetah-v4", output=tmp_path / "c.hdf5", size=20, progress=False))
    result = run_example("--task", "Hopper-v4", "--dataset", str(cheetah), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "observations have shape (17,), but --task Hopper-v4 observes (11,)" in result.stderr


def test_flag_spellings_and_validation() -> None:
    config = config_from_args(
        [
            "--min_q_weight",
            "5",
            "--no-auto-alpha",
            "--hidden_sizes",
            "64",
            "32",
            "--critic-layers",
            "2",
            "--with-lagrange",
            "--max-target-backup",
            "false",
        ]
    )
    assert config.algorithm.cql_weight == 5.0
    assert config.algorithm.auto_alpha is False
    assert config.algorithm.actor_hidden_sizes == [64, 32]
    assert config.algorithm.critic_hidden_sizes == [64, 64]
    assert config.algorithm.with_lagrange is True and config.algorithm.max_target_backup is False
    assert config.run.torch.matmul_precision == "auto"  # TF32 on CUDA, after its learning check
    assert config_from_args(["--matmul_precision", "highest"]).run.torch.matmul_precision == "highest"
    with pytest.raises(OfflineRLError, match="--epoch"):
        config_from_args(["--epoch", "0"])
    with pytest.raises(OfflineRLError, match="--temperature"):
        config_from_args(["--temperature", "0"])
    with pytest.raises(OfflineRLError, match="--watch needs --resume-path"):
        config_from_args(["--watch"])


def test_an_evaluation_cut_at_its_steps_scores_the_episodes_that_ended_as_rlkit_does(tmp_path: Path) -> None:
    """Pendulum's episodes last 200 steps: 300 steps score the first (the second is cut at 100 and left
    out); 150 steps cut the first, which rlkit keeps, having run the whole budget."""
    from tensorboard.backend.event_processing import event_accumulator

    for budget in (300, 150):
        logdir = tmp_path / f"log-{budget}"
        cut = ["--epoch", "1", "--test-steps", str(budget), "--test-steps-cut", "--logdir", str(logdir)]
        result = run_example(*TINY, *cut, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "evaluation before training (1 episode)" in result.stdout
        (run_dir,) = (logdir / "Pendulum-v1" / "cql" / "0").iterdir()
        events = event_accumulator.EventAccumulator(str(run_dir))
        events.Reload()
        assert [item.value for item in events.scalars.Items("eval/episodes")] == [1.0]
        saved = json.loads((run_dir / "run.json").read_text())
        assert saved["config"]["run"]["test_steps_cut"] is True
    with pytest.raises(OfflineRLError, match=r"--test-steps-cut plays one env, as rlkit does: give --test-num 1"):
        config_from_args(["--test-steps", "1000", "--test-steps-cut", "--test-num", "10"])
    with pytest.raises(OfflineRLError, match=r"--test-steps-cut: add --test-steps N"):
        config_from_args(["--test-steps-cut", "--test-num", "1"])


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path: Path, monkeypatch) -> None:
    import datetime

    from offline_rl.runs import files as run_files

    class FrozenClock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 23, 12, 0, 0)

    monkeypatch.setattr(run_files.datetime, "datetime", FrozenClock)
    folders = [run_files.new_log_path(str(tmp_path), "Pendulum-v1", "cql", 0) for _ in range(3)]
    assert [folder.name for folder in folders] == ["261123-120000", "261123-120000-2", "261123-120000-3"]
    assert all(folder.is_dir() for folder in folders)


def test_a_checkpoint_resumed_while_its_run_still_writes_is_refused(tmp_path: Path) -> None:
    """Two processes on one run folder would interleave its logs and overwrite its checkpoints."""
    import subprocess
    import sys

    from offline_rl.core.errors import OfflineRLError
    from offline_rl.core.files import FileLock
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.folder import RunFolder

    folder = tmp_path / "log" / "Pendulum-v1" / "cql" / "0" / "261123-120000"
    folder.mkdir(parents=True)
    checkpoint = folder / "checkpoint.pth"
    checkpoint.write_bytes(b"")
    holder = subprocess.Popen(  # the run still writing there
        [
            sys.executable,
            "-c",
            "import sys, time; from offline_rl.core.files import FileLock; from pathlib import Path; "
            f"FileLock(Path({str(folder / '.lock')!r})).acquire(wait=True); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OfflineRLError, match=r"another run is writing in .*261123-120000 right now"):
            RunFolder.open(
                None,
                RunConfig(resume_path=str(checkpoint)),
                lambda writer: None,
                task="Pendulum-v1",
                algo_name="cql",
                saved={},
            )
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert FileLock(folder / ".lock").acquire(wait=False)  # released with the process that held it


def test_a_dataset_recorded_on_another_env_version_is_named_in_a_warning(tmp_path: Path) -> None:
    import warnings

    from offline_rl.data.fit import TaskMismatchWarning

    data = collect_dataset(
        CollectConfig(task="InvertedPendulum-v5", output=tmp_path / "ip.hdf5", size=200, progress=False)
    )
    small = ["--dataset", str(data), "--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", "--batch-size", "8"]
    mismatches = {}
    for task in ("InvertedPendulum-v4", "InvertedPendulum-v5"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run_example("--task", task, *small, "--hidden-sizes", "8", "--critic-layers", "1", cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        mismatches[task] = [str(w.message) for w in caught if issubclass(w.category, TaskMismatchWarning)]
    assert mismatches["InvertedPendulum-v5"] == []  # evaluated where it was recorded
    (message,) = mismatches["InvertedPendulum-v4"]
    assert message == (
        f"{data} was recorded on InvertedPendulum-v5 but is evaluated on --task InvertedPendulum-v4; "
        "give --task InvertedPendulum-v5 to evaluate where the data came from"
    )


def d4rl_named_file(tmp_path: Path, task: str, name: str, *, v0_layout: bool = False) -> Path:
    """A file under D4RL's name as D4RL's own are: `task` rollouts in D4RL's keys, recording no env;
    `v0_layout`: without `timeouts` and `next_observations`, as older D4RL files are."""
    import h5py

    from conftest import write_d4rl_file

    recorded = collect_dataset(CollectConfig(task=task, output=tmp_path / "rollouts.hdf5", size=200, progress=False))
    keys = (
        "observations",
        "actions",
        "rewards",
        "terminals",
        *(() if v0_layout else ("timeouts", "next_observations")),
    )
    with h5py.File(recorded, "r") as file:
        columns = {key: file[key][()] for key in keys}
    return write_d4rl_file(tmp_path / "d4rl" / name, **columns)


def test_without_task_a_d4rl_dataset_is_evaluated_on_its_own_env_not_the_default(tmp_path: Path) -> None:
    """Walker2d's observations and actions have HalfCheetah's sizes (17, 6): before, `--dataset
    walker2d-medium-v2` alone trained on Walker2d data and evaluated it on the default HalfCheetah."""
    d4rl_named_file(tmp_path, "Walker2d-v4", "walker2d_medium-v2.hdf5")
    small = ["--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", "--batch-size", "16", "--hidden-sizes", "8"]
    result = run_example("--dataset", "walker2d-medium-v2", *small, "--critic-layers", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task: Walker2d-v4, the env of walker2d-medium-v2 (--task to evaluate on another)" in result.stdout
    assert "done: Walker2d-v4 on walker2d-medium-v2" in result.stdout
    (run_dir,) = (tmp_path / "log" / "Walker2d-v4" / "cql" / "0").iterdir()
    assert torch.load(run_dir / "checkpoint.pth", weights_only=True)["config"]["task"] == "Walker2d-v4"
    assert load_policy(run_dir / "behaviour_policy.pt").task == "Walker2d-v4"  # for offline_rl.collect's check

    result = run_example("--resume-path", str(run_dir / "checkpoint.pth"), "--epoch", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "done: Walker2d-v4 on walker2d-medium-v2" in result.stdout and "task:" not in result.stdout


def test_the_cql_papers_v0_datasets_train_and_evaluate_on_their_env(tmp_path: Path) -> None:
    """The CQL paper's tables are on D4RL's v0 files: `--dataset hopper-medium-expert-v0` reads D4RL's
    own v0 file (`hopper_medium_expert.hdf5`, here without time-outs), not the v2 one CORL used."""
    d4rl_named_file(tmp_path, "Hopper-v4", "hopper_medium_expert.hdf5", v0_layout=True)
    small = ["--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", "--batch-size", "16", "--hidden-sizes", "8"]
    result = run_example("--dataset", "hopper-medium-expert-v0", *small, "--critic-layers", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task: Hopper-v4, the env of hopper-medium-expert-v0 (--task to evaluate on another)" in result.stdout
    assert "done: Hopper-v4 on hopper-medium-expert-v0" in result.stdout
    assert re.search(r"last evaluation return -?[\d.]+ ± [\d.]+, normalized score -?[\d.]+", result.stdout)
    assert not (tmp_path / "d4rl" / "hopper_medium_expert-v2.hdf5").exists()


def test_an_adroit_dataset_trains_with_corls_preset_and_evaluates_on_d4rls_env(tmp_path: Path) -> None:
    """`--config configs/cql/door-human-v1.yaml`: CORL's Adroit settings on D4RL's v1 door file, evaluated
    on D4RL/door-v1 (Gymnasium-Robotics' hand with D4RL's reward) and scored against D4RL's references."""
    d4rl_named_file(tmp_path, "D4RL/door-v1", "door-human-v1.hdf5")
    preset = str(REPO_ROOT / "configs/cql/door-human-v1.yaml")
    small = ["--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", "--batch-size", "16", "--hidden-sizes", "8"]
    result = run_example("--config", preset, *small, "--critic-layers", "1", "--critic-width", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task: D4RL/door-v1, the env of door-human-v1 (--task to evaluate on another)" in result.stdout
    assert "done: D4RL/door-v1 on door-human-v1" in result.stdout
    score = re.search(r"last evaluation return (-?[\d.]+) ± [\d.]+, normalized score (-?[\d.]+)", result.stdout)
    assert score is not None
    episode_return, normalized = float(score[1]), float(score[2])
    assert normalized == pytest.approx(100 * (episode_return + 56.512833) / (2880.5693087298737 + 56.512833), abs=0.06)
    (run_dir,) = (tmp_path / "log" / "D4RL_door-v1" / "cql" / "0").iterdir()
    saved = torch.load(run_dir / "checkpoint.pth", weights_only=True)["config"]
    assert (saved["task"], saved["algorithm"]["cql_weight"], saved["algorithm"]["actor_lr"]) == (
        "D4RL/door-v1",
        1.0,
        1e-4,
    )


def test_the_task_follows_the_dataset_only_when_no_task_is_given() -> None:
    from offline_rl.cli.task_choice import evaluation_task
    from offline_rl.data.fit import DatasetEnv

    walker = DatasetEnv("Walker2d-v4", "is D4RL data of gym's Walker2d (gymnasium: Walker2d-v4)")
    assert evaluation_task(None, walker, "walker2d-medium-v2", default="HalfCheetah-v4") == "Walker2d-v4"
    assert evaluation_task("Walker2d-v5", walker, "walker2d-medium-v2", default="HalfCheetah-v4") == "Walker2d-v5"
    assert evaluation_task(None, None, "my_buffer.hdf5", default="HalfCheetah-v4") == "HalfCheetah-v4"


def test_scores_are_normalised_by_the_evaluated_envs_references() -> None:
    """A dataset's reference returns are its own env's: they score runs on any version of that env
    (Minari's v5 data on Hopper-v4), not runs on another robot."""
    from offline_rl.cli.continuous_data import reference_range
    from offline_rl.envs.scores import reference_scores

    walker = {"gymnasium_task": "Walker2d-v4", "ref_min_score": 1.6, "ref_max_score": 4592.3}
    assert reference_range("Walker2d-v4", walker) == (1.6, 4592.3)
    assert reference_range("HalfCheetah-v4", walker) == reference_scores("HalfCheetah-v4")
    minari = {"task": "Hopper-v5", "ref_min_score": -1.0, "ref_max_score": 3000.0}
    assert reference_range("Hopper-v4", minari) == (-1.0, 3000.0)
    assert reference_range("Pendulum-v1", {"ref_min_score": -1.0, "ref_max_score": 2.0}) == (-1.0, 2.0)
    assert reference_range("Pendulum-v1", {"task": "Hopper-v5", "ref_min_score": -1.0, "ref_max_score": 2.0}) == (
        None,
        None,
    )


def test_another_robot_of_the_same_sizes_is_named_in_a_warning(tmp_path: Path) -> None:
    from offline_rl.cli.continuous_data import load_training_data
    from offline_rl.cli.d4rl_cql import D4RLCQLConfig
    from offline_rl.data.fit import TaskMismatchWarning

    d4rl_named_file(tmp_path, "Walker2d-v4", "walker2d_medium-v2.hdf5")
    config = D4RLCQLConfig(task="HalfCheetah-v4", dataset="walker2d-medium-v2")
    with pytest.warns(TaskMismatchWarning) as caught:
        _, task = load_training_data(config)
    assert task == "HalfCheetah-v4"
    (message,) = [str(w.message) for w in caught if issubclass(w.category, TaskMismatchWarning)]
    assert message == (
        "walker2d-medium-v2 is D4RL data of gym's Walker2d (gymnasium: Walker2d-v4) but is evaluated on "
        "--task HalfCheetah-v4; give --task Walker2d-v4 to evaluate where the data came from"
    )


def test_an_atari_game_is_the_same_task_whatever_its_spelling_and_other_ids_must_match() -> None:
    from offline_rl.data.fit import same_task

    assert same_task("ALE/Breakout-v5", "BreakoutNoFrameskip-v4")  # --eval-env sets the settings, not the id
    assert not same_task("BreakoutNoFrameskip-v4", "PongNoFrameskip-v4")
    assert same_task("Hopper-v5", "Hopper-v5") and not same_task("Hopper-v5", "Hopper-v4")  # versions differ


def test_files_loaded_together_keep_the_metadata_they_agree_on() -> None:
    from offline_rl.data.transitions import combined_info

    a = {"name": "a.hdf5", "task": "ALE/Pong-v5", "skipped": 0}
    assert combined_info([a]) == a
    assert combined_info([a, {**a, "name": "b.hdf5"}]) == {**a, "name": "a.hdf5 + b.hdf5"}
    assert combined_info([a, {"name": "b.hdf5", "task": "ALE/Breakout-v5", "skipped": 0}]) == {
        "name": "a.hdf5 + b.hdf5",
        "skipped": 0,
    }
    checkpoints = [{**a, "name": f"Pong/1/ckpt.{n}-first_0.01"} for n in (0, 1, 10, 2, 50)]  # a glob's order
    assert combined_info(checkpoints) == {**a, "name": "Pong/1/ckpt.{0-2,10,50}-first_0.01"}


def test_names_alike_but_for_one_number_are_one_exact_label_and_others_are_joined_whole() -> None:
    from offline_rl.data.names import combined_label

    assert combined_label([f"buffers/ckpt_{n}.hdf5" for n in range(51)]) == "buffers/ckpt_{0-50}.hdf5"
    shards = ["run_1-00003-of-00100", "run_1-00000-of-00100", "run_1-00001-of-00100"]
    assert combined_label(shards) == "run_1-{00000-00001,00003}-of-00100"  # zero padding kept
    assert combined_label(["ckpt_9", "ckpt_10", "ckpt_9"]) == "ckpt_{9-10}"  # by value, each once
    # two numbers differ, a name is not a number there, or one name alone: nothing is abbreviated
    assert combined_label(["run_1-00000", "run_2-00001"], joiner=" ") == "run_1-00000 run_2-00001"
    assert combined_label(["ckpt_1.hdf5", "ckpt_a.hdf5"]) == "ckpt_1.hdf5 + ckpt_a.hdf5"
    assert combined_label(["expert.hdf5"]) == "expert.hdf5"


def trained_on_d4rl_file_with_its_preset(tmp_path: Path, dataset: str, task: str) -> tuple[str, float, float, dict]:
    """A tiny run of `--config configs/cql/<dataset>.yaml` on a file under D4RL's name for `dataset`
    (`task` rollouts), with no `--task`: (its output, last return, normalised score, saved config)."""
    from offline_rl.data.d4rl import d4rl_path

    d4rl_named_file(tmp_path, task, d4rl_path(dataset).name)
    preset = str(REPO_ROOT / "configs/cql" / f"{dataset}.yaml")
    small = ["--epoch", "1", "--step-per-epoch", "2", "--test-num", "2", "--batch-size", "16", "--hidden-sizes", "8"]
    result = run_example("--config", preset, *small, "--critic-layers", "1", "--critic-width", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"task: {task}, the env of {dataset} (--task to evaluate on another)" in result.stdout
    assert f"done: {task} on {dataset}" in result.stdout
    score = re.search(r"last evaluation return (-?[\d.]+) ± [\d.]+, normalized score (-?[\d.]+)", result.stdout)
    assert score is not None
    (run_dir,) = (tmp_path / "log" / task.replace("/", "_") / "cql" / "0").iterdir()
    saved = torch.load(run_dir / "checkpoint.pth", weights_only=True)["config"]
    return result.stdout, float(score[1]), float(score[2]), saved


def test_an_antmaze_dataset_trains_with_corls_preset_and_evaluates_on_d4rls_antmaze(tmp_path: Path) -> None:
    """`--config configs/cql/antmaze-umaze-v2.yaml` on D4RL's file (its name, its 29 numbers of the ant's
    state): evaluated on D4RL/antmaze-umaze-v2 (D4RL's maze and ant rebuilt), scored as a success rate.
    Before, this stopped with an error pointing to Minari's re-recordings."""
    from offline_rl.envs.mujoco import margins_add_up

    task = "D4RL/antmaze-umaze-v2"
    output, episode_return, normalized, saved = trained_on_d4rl_file_with_its_preset(tmp_path, "antmaze-umaze-v2", task)
    assert normalized == pytest.approx(100 * episode_return, abs=0.06)  # D4RL's AntMaze range: 0 to 1
    assert (f"contacts: {task}'s margin 0.01 kept as MuJoCo <= 3.4 applied it" in output) == margins_add_up()
    assert (saved["task"], saved["algorithm"]["reward_scale"], saved["algorithm"]["reward_bias"]) == (task, 10.0, -5.0)


def test_a_maze2d_dataset_trains_with_corls_preset_and_evaluates_on_d4rls_maze(tmp_path: Path) -> None:
    """`--config configs/cql/maze2d-umaze-dense-v1.yaml`: CORL's Maze2D settings on D4RL's file (its name,
    its (x, y, vx, vy) observations), evaluated on D4RL/maze2d-umaze-dense-v1 (D4RL's maze rebuilt) and
    scored against that maze's and reward's own references."""
    task = "D4RL/maze2d-umaze-dense-v1"
    _, episode_return, normalized, saved = trained_on_d4rl_file_with_its_preset(tmp_path, "maze2d-umaze-dense-v1", task)
    low, high = 68.537689, 193.66285642381482  # D4RL's umaze-dense pair, not the sparse maze's
    assert normalized == pytest.approx(100 * (episode_return - low) / (high - low), abs=0.06)
    assert (saved["task"], saved["algorithm"]["with_lagrange"], saved["algorithm"]["actor_lr"]) == (task, True, 3e-5)


def test_the_d4rl_converter_names_the_datasets_own_env_when_task_does_not_fit(tmp_path: Path) -> None:
    d4rl_named_file(tmp_path, "Walker2d-v4", "walker2d_medium-v2.hdf5")
    args = ["walker2d-medium-v2", "--output", str(tmp_path / "w.hdf5"), "--task", "Hopper-v4"]
    result = run_in_process("converters/d4rl.py", *args, cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "w.hdf5").exists()
    assert result.stderr.strip().splitlines()[-1] == (
        "error: walker2d-medium-v2: observations have shape (17,), but --task Hopper-v4 observes (11,); it is D4RL "
        "data of gym's Walker2d (gymnasium: Walker2d-v4): give --task Walker2d-v4"
    )


@pytest.mark.parametrize("summary", [None, "[]", "{not json"])
def test_a_finished_run_whose_summary_is_missing_or_damaged_is_finished_again(tmp_path: Path, summary) -> None:
    """Only a readable summary says the run ended; without one, the resume evaluates and writes it."""
    from offline_rl.runs.config import OfflineRunConfig
    from offline_rl.runs.session import finished_run

    (tmp_path / "checkpoint.pth").write_bytes(b"")
    run = OfflineRunConfig(epoch=2, resume_path=str(tmp_path / "checkpoint.pth"))
    if summary is not None:
        (tmp_path / "summary.json").write_text(summary)
    assert finished_run(run, {"epoch": 2}) is None
    (tmp_path / "summary.json").write_text('{"last": {"return_mean": 1.0}}')
    assert finished_run(run, {"epoch": 2}) == {"last": {"return_mean": 1.0}}
