"""The four SAC behaviour runs of D4RL's recipe (`examples/mujoco_sac.py` with `configs/sac/<Task>-v4.yaml`),
trained a time budget at a time: each call resumes every unfinished run where its last checkpoint left it
(or starts it), gives the budget's time to the first unfinished task, stops it with SIGTERM (which
checkpoints it) when the budget is spent, and prints where each run stands.

    python benchmarks/behaviour_runs.py --logdir /path/kept/between/calls --seconds 3000
    python benchmarks/behaviour_runs.py --logdir ... --status        # where each run stands, nothing run

The runs keep their replay beside each checkpoint, so the folder must persist between calls (hundreds of
MB per task once full). Once a run has finished, `python -m offline_rl.collect --recipe <env>-<kind>
--behaviour-run <its folder>` makes its datasets.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "Ant-v4")


def run_folder(logdir: Path, task: str) -> Path | None:
    """The task's newest run folder under `logdir` that holds a checkpoint."""
    folders = sorted(path.parent for path in (logdir / task / "sac").glob("*/*/checkpoint.pth"))
    return folders[-1] if folders else None


def standing(logdir: Path, task: str) -> str:
    folder = run_folder(logdir, task)
    if folder is None:
        return f"{task}: not started"
    index = folder / "snapshots" / "returns.json"
    snapshots = json.loads(index.read_text()) if index.is_file() else []
    last = snapshots[-1] if snapshots else None
    done = "finished" if (folder / "summary.json").is_file() else "unfinished"
    if last is None:
        return f"{task}: {done}, no evaluation yet ({folder})"
    score = f", normalised {last['normalized_score']:.1f}" if "normalized_score" in last else ""
    return (
        f"{task}: {done}, epoch {last['epoch']}, {last['env_steps']} env steps, "
        f"return {last['return_mean']:.1f}{score} ({folder})"
    )


def train(logdir: Path, task: str, seconds: float, extra: list[str]) -> None:
    """Resume (or start) the task's run and stop it with SIGTERM after `seconds`."""
    folder = run_folder(logdir, task)
    if folder is not None:
        command = ["--resume-path", str(folder / "checkpoint.pth")]
    else:
        command = ["--config", str(REPO / "configs/sac" / f"{task}.yaml"), "--logdir", str(logdir)]
    process = subprocess.Popen([sys.executable, str(REPO / "examples/mujoco_sac.py"), *command, *extra])
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the run checkpoints where it is and exits
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", type=Path, required=True, help="where the runs are kept between calls")
    parser.add_argument("--seconds", type=float, default=540.0, help="the time this call may train")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help="in the order they are trained")
    parser.add_argument("--status", action="store_true", help="print where each run stands and train nothing")
    parser.add_argument("extra", nargs="*", help="more flags for a run's first start (after --)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.seconds
    for task in [] if args.status else args.tasks:
        folder = run_folder(args.logdir, task)
        if folder is not None and (folder / "summary.json").is_file():
            continue
        left = deadline - time.monotonic()
        if left <= 30:
            break
        train(args.logdir, task, left, args.extra if folder is None else [])
    for task in args.tasks:
        print(standing(args.logdir, task))


if __name__ == "__main__":
    main()
