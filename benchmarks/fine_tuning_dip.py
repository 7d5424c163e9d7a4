"""CQL against Cal-QL fine-tuning online from medium-level data: the score at the switch, right after it (the
dip Cal-QL's calibration is meant to avoid) and at the end, over seeds, as a table and a plot.

The recipe, all on a CPU: a short SAC run (`examples/mujoco_sac.py`) on Pendulum-v1 gives a medium policy
(its snapshot after `--behaviour-epoch` epochs of 1000 env steps); `python -m offline_rl.collect` plays it
(actions drawn from its Gaussian, as D4RL collected) into a dataset; `examples/d4rl_cql.py` trains on it
offline, then fine-tunes online with half of each batch from the offline data, once as CQL and once as Cal-QL
(`--calibrated`), the two differing in nothing else. Small networks keep it inside a CPU's budget.

    python benchmarks/fine_tuning_dip.py --workdir /path/kept/between/calls [--seeds 3] [--jobs 2]

Every step keeps its result in the workdir: a second call skips what is done and resumes an unfinished run
from its checkpoint (a larger `--online-steps` fine-tunes the finished runs further). It prints the table
and writes the plot (`--plot`, by default the documentation's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TASK = "Pendulum-v1"
NETWORKS = ["--hidden-sizes", "64", "64"]
ALGORITHMS = {"CQL": [], "Cal-QL": ["--calibrated"]}


def run(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")


def behaviour_policy(workdir: Path, epoch: int) -> Path:
    """The SAC snapshot after `epoch` epochs of a short Pendulum run (trained once)."""
    snapshots = sorted((workdir / "behaviour").glob(f"{TASK}/sac/0/*/snapshots"))
    if not snapshots:
        run([
            "examples/mujoco_sac.py", "--task", TASK, *NETWORKS, "--step-per-epoch", "1000", "--epoch", str(epoch),
            "--start-timesteps", "1000", "--test-num", "10", "--threads", "1", "--no-checkpoint-replay",
            "--logdir", str(workdir / "behaviour"),
        ])  # fmt: skip
        snapshots = sorted((workdir / "behaviour").glob(f"{TASK}/sac/0/*/snapshots"))
    return snapshots[-1] / f"epoch-{epoch:04d}.pt"


def medium_dataset(workdir: Path, policy: Path, size: int) -> Path:
    path = workdir / f"pendulum-medium-{size}.hdf5"
    if not path.is_file():
        run([
            "-m", "offline_rl.collect", "--task", TASK, "--policy", str(policy), "--sample-policy", "--size", str(size),
            "--output", str(path), "--no-progress",
        ])  # fmt: skip
    return path


def train(workdir: Path, dataset: Path, name: str, seed: int, args: argparse.Namespace) -> Path:
    """One run, offline then online, resumed where an earlier call left it; its folder."""
    logdir = workdir / "runs" / name
    folders = sorted(logdir.glob(f"{TASK}/cql/{seed}/*"))
    if folders and is_finished(folders[-1], args.online_steps):
        return folders[-1]
    if folders and (folders[-1] / "checkpoint.pth").is_file():  # stopped, or asked for more env steps now
        resume = ["--resume-path", str(folders[-1] / "checkpoint.pth"), "--online-steps", str(args.online_steps)]
        run(["examples/d4rl_cql.py", *resume])
        return folders[-1]
    run([
        "examples/d4rl_cql.py", "--dataset", str(dataset), "--task", TASK, *NETWORKS, "--critic-layers", "2",
        "--actor-lr", "1e-4", "--alpha-lr", "1e-4", *ALGORITHMS[name], "--step-per-epoch", str(args.eval_interval),
        "--epoch", str(args.offline_updates // args.eval_interval), "--online-steps", str(args.online_steps),
        "--online-eval-interval", str(args.online_eval_interval), "--mixing-ratio", "0.5", "--test-num", "10",
        "--seed", str(seed), "--threads", "1", "--logdir", str(logdir),
    ])  # fmt: skip
    return sorted(logdir.glob(f"{TASK}/cql/{seed}/*"))[-1]


def is_finished(folder: Path, online_steps: int) -> bool:
    summary = folder / "summary.json"
    if not summary.is_file():
        return False
    record = json.loads(summary.read_text())
    return "fine_tuning" in record and record["total_env_steps"] >= online_steps


def curve(folder: Path) -> tuple[int, list[tuple[int, float]]]:
    """(offline updates, [(env steps since the switch, mean return)]): offline evaluations at negative steps."""
    from offline_rl.results.runs import read_run

    offline = int(json.loads((folder / "summary.json").read_text())["fine_tuning"]["offline_updates"])
    return offline, [
        (evaluation.updates - offline, evaluation.return_mean) for evaluation in read_run(folder).evaluations
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="kept between calls")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (each on one thread)")
    parser.add_argument("--behaviour-epoch", type=int, default=2)
    parser.add_argument("--dataset-size", type=int, default=20_000)
    parser.add_argument("--offline-updates", type=int, default=10_000)
    parser.add_argument("--eval-interval", type=int, default=1000, help="offline updates between evaluations")
    parser.add_argument("--online-steps", type=int, default=5000)
    parser.add_argument("--online-eval-interval", type=int, default=500)
    parser.add_argument("--plot", type=Path, default=REPO / "docs/pages/fine-tuning-pendulum.png")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    dataset = medium_dataset(args.workdir, behaviour_policy(args.workdir, args.behaviour_epoch), args.dataset_size)
    jobs = [(name, seed) for seed in range(args.seeds) for name in ALGORITHMS]
    with ThreadPoolExecutor(args.jobs) as pool:
        folders = list(pool.map(lambda job: train(args.workdir, dataset, *job, args), jobs))
    curves: dict[str, list[list[tuple[int, float]]]] = {name: [] for name in ALGORITHMS}
    for (name, _), folder in zip(jobs, folders, strict=True):
        curves[name].append(curve(folder)[1])
    print(table(curves, args))
    plot(curves, args.plot)


def table(curves: dict[str, list[list[tuple[int, float]]]], args: argparse.Namespace) -> str:
    """Mean ± std over seeds of the return at the switch, at the first online evaluation, the lowest online
    one, and the last."""

    def at(values: list[float]) -> str:
        return f"{np.mean(values):.0f} ± {np.std(values):.0f}"

    first = args.online_eval_interval
    rows = [
        "| | at the switch | after " + f"{first} env steps | lowest online | after {args.online_steps} |",
        "|---|---|---|---|---|",
    ]
    for name, runs in curves.items():
        switch = [dict(points)[0] for points in runs]
        after = [dict(points)[first] for points in runs]
        lowest = [min(value for step, value in points if step > 0) for points in runs]
        last = [points[-1][1] for points in runs]
        rows.append(f"| {name} | {at(switch)} | {at(after)} | {at(lowest)} | {at(last)} |")
    return "\n".join(rows)


def plot(curves: dict[str, list[list[tuple[int, float]]]], path: Path) -> None:
    from offline_rl.results.plots import _pyplot

    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for name, runs in curves.items():
        steps = np.array([step for step, _ in runs[0]])
        values = np.array([[value for _, value in points] for points in runs])
        mean, std = values.mean(axis=0), values.std(axis=0)
        axis.plot(steps, mean, label=name)
        axis.fill_between(steps, mean - std, mean + std, alpha=0.2)
    axis.axvline(0, color="grey", linestyle="--", linewidth=1)
    axis.set_xlabel("updates before the switch (offline) | env steps after it (online, one update each)")
    axis.set_ylabel("evaluation return (Pendulum-v1)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
