"""`examples/d4rl_td3_bc.py`, `d4rl_rebrac.py`, `d4rl_iql.py` and `d4rl_bc.py` as a user runs them: the recipe of
`d4rl_cql.py` with another algorithm, so the same run folder, exact resume, `--watch`, export, policy
file, sweeps and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_exact_resume import assert_resume_is_exact, run_folder

from conftest import run_in_process
from offline_rl.algorithms.export.policy_file import load_policy
from offline_rl.sweep.command import main as sweep_main

DATA = ["--task", "Pendulum-v1", "--dataset-size", "1500", "--test-num", "1", "--batch-size", "32"]
PROGRAMS = {
    # An odd epoch length: the resumed run's first update is one with TD3's delayed actor step.
    "examples/d4rl_td3_bc.py": [*DATA, "--step-per-epoch", "15", "--hidden-sizes", "16", "16"],
    "examples/d4rl_bc.py": [*DATA, "--step-per-epoch", "15", "--hidden-sizes", "16", "--top-fraction", "0.5"],
    "examples/d4rl_rebrac.py": [*DATA, "--step-per-epoch", "15", "--hidden-sizes", "16", "16"],
    # The cosine schedule spans the uninterrupted run's 30 updates in both runs.
    "examples/d4rl_iql.py": [*DATA, "--step-per-epoch", "15", "--hidden-sizes", "16", "--schedule-updates", "30"],
}


@pytest.mark.parametrize("script", PROGRAMS)
def test_a_run_stopped_and_resumed_trains_as_the_one_never_stopped(tmp_path: Path, script: str) -> None:
    stopped = assert_resume_is_exact(script, PROGRAMS[script], tmp_path)
    algo = script.removeprefix("examples/d4rl_").removesuffix(".py")
    assert stopped.parent.parent.name == algo  # <logdir>/<task>/<algo>/<seed>/<stamp>
    for name in ("run.json", "policy.pth", "policy_last.pth", "summary.json", "behaviour_policy.pt"):
        assert (stopped / name).is_file(), name
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["total_updates"] == 30 and summary["last"]["epoch"] == 2  # the resumed run's end


@pytest.mark.parametrize("script", PROGRAMS)
def test_watch_export_and_the_policy_file_act_as_the_trained_actor(tmp_path: Path, script: str) -> None:
    done = run_in_process(script, *PROGRAMS[script], "--epoch", "1", "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = run_folder(tmp_path / "log")
    watched = run_in_process(script, "--watch", "--resume-path", str(folder / "policy_last.pth"), cwd=tmp_path)
    last_return = json.loads((folder / "summary.json").read_text())["last"]["return_mean"]
    assert watched.returncode == 0, watched.stderr[-2000:]
    assert f"policy_last.pth: return {last_return:.2f} ± " in watched.stdout  # the score the run printed
    exported = run_in_process(
        script, "--resume-path", str(folder / "policy.pth"), "--export-policy", "policy.pt2", cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    program = torch.export.load(tmp_path / "policy.pt2").module()
    policy = load_policy(folder / "behaviour_policy.pt")  # written at the best evaluation, as policy.pth
    observations = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    with torch.no_grad():
        expected = program(torch.as_tensor(observations)).numpy()
    assert np.abs(expected).max() > 0.01  # a trained actor, not zeros
    assert np.allclose(policy.act(observations), expected, atol=1e-5)


@pytest.mark.parametrize(
    ("script", "flags", "message"),
    [
        ("examples/d4rl_bc.py", ["--top-fraction", "0"], "error: --top-fraction 0.0: expected a value in (0, 1]"),
        ("examples/d4rl_td3_bc.py", ["--policy-freq", "0"], "error: --policy-freq 0: expected at least 1"),
        ("examples/d4rl_td3_bc.py", ["--alpha", "-1"], "error: --alpha -1.0: expected a positive number"),
        ("examples/d4rl_iql.py", ["--expectile", "1"], "error: --expectile 1.0: expected a value in (0, 1)"),
        ("examples/d4rl_iql.py", ["--actor-schedule", "linear"], "--actor-schedule"),
        ("examples/d4rl_td3_bc.py", ["--cql-weight", "5"], "unrecognized arguments: --cql-weight 5"),
    ],
)
def test_bad_settings_get_one_line_naming_the_flag(tmp_path: Path, script: str, flags: list[str], message: str) -> None:
    done = run_in_process(script, *flags, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert message in done.stderr.strip().splitlines()[-1]  # argparse heads an unknown flag with its usage line


def test_a_sweep_runs_the_new_programs_with_their_own_settings(tmp_path: Path, capsys) -> None:
    grid = ["--grid", "alpha=1,2.5", "--set", "task=Pendulum-v1", "--logdir", str(tmp_path), "--dry-run"]
    assert sweep_main(["--example", "d4rl_td3_bc", *grid]) == 0
    assert "--task Pendulum-v1 --alpha 2.5" in capsys.readouterr().out
    with pytest.raises(Exception, match="unknown setting 'cql_weight'"):
        sweep_main(["--example", "d4rl_bc", "--grid", "cql_weight=1", "--logdir", str(tmp_path), "--dry-run"])
