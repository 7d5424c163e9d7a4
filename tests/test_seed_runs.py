"""`--num-seeds S` as a user runs it: S seeds in one batched update, each writing the run folder a single
run of its seed writes; stopped anywhere (Ctrl-C between updates, a kill between two seeds'
checkpoints) and resumed with the command a user types, the batch ends as the batch never stopped; a
seed's checkpoint resumes alone with --num-seeds 1; results tables read the folders as separate runs;
bad combinations get one line."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import torch
from test_d4rl_cql_example import TINY
from test_exact_resume import assert_same_checkpoints, checkpoint_state, run_ok
from test_kill_harness import run_stopped

from conftest import run_in_process
from offline_rl.runs.files import RUN_NEXT_CHECKPOINT_FILE

MACHINE = ["--threads", "1", "--device", "cpu"]
SEEDS = ["--num-seeds", "2", "--seed", "3"]


def seed_folders(log: Path) -> dict[int, Path]:
    """The run folder of each seed, by seed (<logdir>/<task>/<algo>/<seed>/<stamp>)."""
    return {int(path.parent.parent.name): path.parent for path in log.rglob("run.json")}


def seed_evaluations(stdout: str) -> list[tuple[int, str, str]]:
    found = re.findall(
        r"^seed (\d+): evaluation (\d+)(?: of the resumed weights)? \(\d+ episodes?\): (.+)$", stdout, re.M
    )
    return [(int(seed), index, text) for seed, index, text in found]


def test_each_seed_writes_a_single_runs_folder_from_a_single_runs_start(tmp_path: Path) -> None:
    out = run_ok("examples/d4rl_cql.py", *TINY, *MACHINE, *SEEDS, "--epoch", "1", "--logdir", "batch", cwd=tmp_path)
    folders = seed_folders(tmp_path / "batch")
    assert sorted(folders) == [3, 4]
    for seed, folder in folders.items():
        for name in (
            "run.json",
            "checkpoint.pth",
            "policy.pth",
            "policy_last.pth",
            "summary.json",
            "behaviour_policy.pt",
        ):
            assert (folder / name).is_file(), name
        settings = json.loads((folder / "run.json").read_text())
        assert settings["config"]["run"]["seed"] == seed and settings["config"]["run"]["num_seeds"] == 2
        assert json.loads((folder / "summary.json").read_text())["total_updates"] == 15
        assert not (folder / RUN_NEXT_CHECKPOINT_FILE).exists()
    assert re.search(r"^2 seeds: last evaluation return mean -?\d+\.\d+ ± \d+\.\d+", out, re.M)
    # Seed 4 starts from the weights a single run of seed 4 starts from: the same evaluation before training.
    single = run_ok(
        "examples/d4rl_cql.py", *TINY, *MACHINE, "--seed", "4", "--epoch", "1", "--logdir", "one", cwd=tmp_path
    )
    before = re.search(r"^evaluation before training \(1 episode\): (.+)$", single, re.M)
    assert before and f"seed 4: evaluation before training (1 episode): {before.group(1)}" in out

    # A seed's checkpoint resumes alone, as a single run, with --num-seeds 1.
    alone = ["--resume-path", str(folders[4] / "checkpoint.pth"), "--num-seeds", "1", "--epoch", "2", *MACHINE]
    resumed = run_ok("examples/d4rl_cql.py", *alone, cwd=tmp_path)
    assert ": 15 updates (30 in all) in " in resumed and "seed 3" not in resumed
    # A seed's checkpoint with its batch's --num-seeds resumes the batch, and a mismatch is one line.
    again = ["--resume-path", str(folders[3] / "checkpoint.pth"), "--num-seeds", "3", "--epoch", "2"]
    wrong = run_in_process("examples/d4rl_cql.py", *again, cwd=tmp_path)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "a checkpoint of a run of 2 seed(s), not --num-seeds 3; resume it with --num-seeds 2" in wrong.stderr


def test_a_batch_stopped_anywhere_and_resumed_ends_as_the_batch_never_stopped(tmp_path: Path) -> None:
    """Ctrl-C between two updates (every seed's mid-epoch checkpoint), then a kill right after the first
    seed's checkpoint of the next round is renamed (the round completed on resume), then one before any
    rename (the round dropped, the epoch made again): each seed ends as in the batch never stopped."""
    flags = [*TINY, *MACHINE, *SEEDS, "--epoch", "3"]
    straight_out = run_ok("examples/d4rl_cql.py", *flags, "--logdir", str(tmp_path / "straight"), cwd=tmp_path)
    stops = [
        ("update:20:SIGINT", 130),  # inside epoch 2
        ("after-checkpoint-rename:1:SIGKILL", -signal.SIGKILL),  # epoch 2's round: seed 3 renamed, seed 4 not
        ("inside-checkpoint-write:2:SIGKILL", -signal.SIGKILL),  # epoch 3's round: seed 4's written aside, cut
        ("none:0:-", 0),
    ]
    logdir, out = tmp_path / "stopped", tmp_path / "out"
    statuses = run_stopped([at for at, _ in stops], [*flags, "--logdir", str(logdir)], logdir, out)
    printed = []
    for number, ((at, status), ended) in enumerate(zip(stops, statuses, strict=True)):
        stdout, stderr = (out / f"{number}.out").read_text(), (out / f"{number}.err").read_text()
        assert ended == status, (at, stdout[-1500:], stderr[-1500:])
        assert "Traceback" not in stderr, (at, stderr[-1500:])
        printed += seed_evaluations(stdout)
        if status == 130:  # one line for the batch: how far it got, and the command that goes on
            (line,) = [line for line in stdout.splitlines() if line.startswith("interrupted after")]
            assert re.fullmatch(r"interrupted after 20 updates of 2 seeds; continue with --resume-path \S+", line)
    expected = {(seed, index): text for seed, index, text in seed_evaluations(straight_out)}
    assert {(seed, index) for seed, index, _ in printed} == set(expected)
    assert all(expected[(seed, index)] == text for seed, index, text in printed)
    straight, stopped = seed_folders(tmp_path / "straight"), seed_folders(logdir)
    for seed in (3, 4):
        assert_same_checkpoints(straight[seed] / "checkpoint.pth", stopped[seed] / "checkpoint.pth", exact=True)
        a, b = (
            checkpoint_state(folder / "policy_last.pth", ("algorithm",)) for folder in (straight[seed], stopped[seed])
        )
        assert all(torch.equal(a[name], b[name]) for name in a)
        assert not (stopped[seed] / RUN_NEXT_CHECKPOINT_FILE).exists()


def test_the_results_table_groups_a_batchs_seeds_with_separate_runs_of_the_same_settings(tmp_path: Path) -> None:
    from offline_rl.results.report import group_rows
    from offline_rl.results.runs import read_runs

    run_ok("examples/d4rl_cql.py", *TINY, *MACHINE, *SEEDS, "--epoch", "1", "--logdir", "log", cwd=tmp_path)
    run_ok("examples/d4rl_cql.py", *TINY, *MACHINE, "--seed", "5", "--epoch", "1", "--logdir", "log", cwd=tmp_path)
    runs = read_runs([tmp_path / "log"])
    assert sorted(run.seed for run in runs) == [3, 4, 5]
    (row,) = group_rows(runs)
    assert row.runs == 3


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--num-seeds", "2", "--watch"], "--num-seeds trains seeds; --watch"),
        (["--num-seeds", "2", "--video-interval", "1"], "--num-seeds: --video-interval and --render"),
        (["--num-seeds", "0"], "--num-seeds 0: expected a value in [1, 64]"),
        (["--num-seeds", "65"], "--num-seeds 65"),
    ],
)
def test_bad_combinations_get_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    done = run_in_process("examples/d4rl_cql.py", *TINY, *flags, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1]


def test_discrete_cql_trains_seeds_in_one_batch_too(tmp_path: Path) -> None:
    """`examples/atari_cql.py --num-seeds 2` on a CartPole buffer: a folder and a summary per seed."""
    import warnings

    from offline_rl.examples import atari_cql as atari_cql_program
    from offline_rl.examples import atari_qrdqn as atari_qrdqn_program

    buffer_path = tmp_path / "cartpole.hdf5"
    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
    atari_qrdqn_program.main([*collect, "--save-buffer-name", str(buffer_path), "--logdir", str(tmp_path / "q")])
    budget = ["--epoch", "1", "--update-per-epoch", "20", "--test-num", "1", "--num-quantiles", "8", *MACHINE]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = atari_cql_program.main(
            ["--load-buffer-name", str(buffer_path), *budget, *SEEDS, "--logdir", str(tmp_path / "log")]
        )
    assert [run["total_updates"] for run in summary["seeds"]] == [20, 20]
    assert sorted(seed_folders(tmp_path / "log")) == [3, 4]


def test_a_diverged_seed_is_recorded_and_leaves_while_the_others_train_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 4's figures turn NaN in its first epoch: its folder records the divergence as a diverged
    single run's does (no summary, `diverged.json`), and seed 3 trains its two epochs to its summary."""
    from offline_rl.algorithms import seeds

    count = seeds.SeedStatistics.count

    def poisoned(self: seeds.SeedStatistics, updates_done: int) -> object:
        if updates_done == 10 and len(self.per_seed) == 2:
            self._sum[:, 1] = float("nan")  # seed 4's window
        return count(self, updates_done)

    monkeypatch.setattr(seeds.SeedStatistics, "count", poisoned)
    done = run_in_process(
        "examples/d4rl_cql.py", *TINY, *MACHINE, *SEEDS, "--epoch", "2", "--log-interval", "5", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^seed 4: training diverged: .*nan.*; the other seeds train on$", done.stdout, re.M)
    folders = seed_folders(tmp_path / "log")
    assert (folders[4] / "diverged.json").is_file() and not (folders[4] / "summary.json").exists()
    assert json.loads((folders[3] / "summary.json").read_text())["total_updates"] == 30
    assert "seed 3: evaluation 2 " in done.stdout and "seed 4: evaluation 1 " not in done.stdout

    # Resumed, the batch goes on without the seed that left it (which diverged before its first checkpoint).
    monkeypatch.setattr(seeds.SeedStatistics, "count", count)
    again = ["--resume-path", str(folders[3] / "checkpoint.pth"), "--epoch", "3", *MACHINE]
    resumed = run_in_process("examples/d4rl_cql.py", *again, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "seed 4: its training diverged" in resumed.stdout and "seed 3: evaluation 3 " in resumed.stdout
    assert json.loads((folders[3] / "summary.json").read_text())["total_updates"] == 45


def test_a_sweep_batches_consecutive_seeds_of_one_setting_and_nothing_else() -> None:
    from offline_rl.sweep.seed_batches import batch_arguments, seed_batches
    from offline_rl.sweep.spec import Trial

    def trial(seed: int | None, weight: int) -> Trial:
        values = ((("seed", seed),) if seed is not None else ()) + (("cql_weight", weight),)
        arguments = (*(("--seed", str(seed)) if seed is not None else ()), "--wandb-name", f"s{seed}w{weight}")
        return Trial(f"seed={seed}__w={weight}", arguments, values)

    trials = [trial(seed, weight) for weight in (1, 5) for seed in (0, 1, 2, 4)] + [trial(None, 9)]
    batches = [[t.id for t in batch] for batch in seed_batches(trials)]
    assert batches == [
        ["seed=0__w=1", "seed=1__w=1", "seed=2__w=1"],
        ["seed=4__w=1"],  # not consecutive: alone
        ["seed=0__w=5", "seed=1__w=5", "seed=2__w=5"],
        ["seed=4__w=5"],
        ["seed=None__w=9"],  # no seed axis: alone
    ]
    assert batch_arguments(seed_batches(trials)[0]) == ["--seed", "0", "--num-seeds", "3"]


def test_a_sweeps_batch_is_failed_by_divergence_only_when_every_seed_diverged(tmp_path: Path) -> None:
    from offline_rl.sweep.trial import diverged_message

    runs = [tmp_path / "Hopper-v4" / "cql" / str(seed) / "stamp" for seed in (0, 1)]
    for run in runs:
        run.mkdir(parents=True)
        (run / "run.json").write_text("{}")
    (runs[0] / "diverged.json").write_text(json.dumps({"message": "training diverged: nan"}))
    assert diverged_message(tmp_path) is None  # seed 1 goes on: the batch is resumed, without seed 0
    (runs[1] / "diverged.json").write_text(json.dumps({"message": "training diverged: inf"}))
    assert diverged_message(tmp_path) == "training diverged: nan"


def test_a_batch_killed_between_two_seeds_summaries_finishes_the_other_on_resume(tmp_path: Path) -> None:
    run_ok("examples/d4rl_cql.py", *TINY, *MACHINE, *SEEDS, "--epoch", "1", cwd=tmp_path)
    folders = seed_folders(tmp_path / "log")
    (folders[4] / "summary.json").unlink()  # as a kill after seed 3's summary, before seed 4's
    out = run_ok("examples/d4rl_cql.py", "--resume-path", str(folders[3] / "checkpoint.pth"), *MACHINE, cwd=tmp_path)
    assert "nothing to do" not in out
    finished = json.loads((folders[4] / "summary.json").read_text())
    assert finished["total_updates"] == 15 and finished["last"] is not None
    again = run_ok("examples/d4rl_cql.py", "--resume-path", str(folders[3] / "checkpoint.pth"), *MACHINE, cwd=tmp_path)
    assert "already trained its 1 epochs" in again  # every seed finished: nothing to do


def test_a_batch_job_reports_each_of_its_trials_on_either_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_job` (the local engine's and, pickled, a Ray task's): one process for the batch, one outcome per
    trial, each read from its own seed's folder."""
    import pickle

    from offline_rl.sweep import engines
    from offline_rl.sweep.spec import Trial
    from offline_rl.sweep.trial import TrialOutcome

    run = tmp_path / "Pendulum-v1" / "cql" / "1" / "stamp"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"last": {"return_mean": -5.0}, "total_updates": 7}))
    monkeypatch.setattr(engines, "run_trial", lambda **kwargs: TrialOutcome(kwargs["trial_id"], "done"))
    batch = tuple(Trial(f"seed={seed}", ("--seed", str(seed)), (("seed", seed),)) for seed in (0, 1))
    job = engines.TrialJob("m", "seed=0", ["--seed", "0", "--num-seeds", "2"], str(tmp_path), batch=batch)
    outcomes = engines.run_job(pickle.loads(pickle.dumps(job)))
    assert [(o.id, o.status) for o in outcomes] == [("seed=0", "failed"), ("seed=1", "done")]
    assert outcomes[0].message.startswith("no summary of seed 0") and outcomes[1].score == -5.0
    assert job.ids == ["seed=0", "seed=1"]
