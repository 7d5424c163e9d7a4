"""Several `d4rl_cql.py` runs sharing one machine: the total update rate of 1, 2, 4... runs at once.

    python benchmarks/concurrent_runs.py [--runs 1 2 4] [--updates 60000 | --whole-runs EPOCHS] [--device auto] [--mps]
        [--mps-thread-percentage PERCENT [PERCENT ...]] [--task HalfCheetah-v4] [--dataset-size 20000]
        [--critic-variant NAME [NAME ...]] [-- further d4rl_cql.py flags]

Why: sweeps pack several trials onto one GPU, and how many pay depends on how much of the device one
run leaves idle. Each group of runs starts together (seeds 0, 1, ...; same locally generated
dataset, created once before timing, as is torch.compile's on-disk cache); each run's rate is
read from its own TensorBoard log: updates between the first logged window after 20% of the run
and its last window, over the wall time between them, so start-up, compilation and the final
evaluation are not counted. The table gives each run's rate, the group's total and the total
relative to one run alone (issue #10's target: 4 runs together ≥ 2× one).

Processes on one GPU take turns unless an MPS daemon lets their kernels run side by side
(`offline_rl.core.gpu_sharing` says why); `--mps` starts a private one for each group of two or more
runs, each run held to `--mps-thread-percentage` of the multiprocessors (by default the share a
sweep gives its trials: 200 / runs, at most 100), as `python -m offline_rl.sweep --mps` does for a
sweep's trials; given several percentages, each group of two or more runs once at each, all
against the same run alone (a scan of shares in one device call). One run alone never goes
through the daemon: it is timed as it trains without company, the fastest way to train one
(one run through MPS is slower), so the ratio compares sharing with training the runs one after
another.

`--whole-runs EPOCHS` times runs as a sweep's trials train instead: EPOCHS epochs of the example's own
schedule (`--step-per-epoch` 5000, each epoch ending with an evaluation of `--test-num` 10 episodes
and a checkpoint), each run's rate read from its evaluations: updates between its first evaluation
after 20% of the run and its last, over the wall time between them, evaluations and checkpoints
included. Why both: the training-only rate is how well the updates themselves share the device;
the whole-run rate is how much sooner a sweep's grid ends, since one run alone leaves the GPU idle
while it evaluates on the CPU, and runs side by side fill each other's gaps.

`--critic-variant` makes every run compute its critics another way (`critic_variants.py`; `ensemble`
is the library's own); given several, the whole table is timed once per way, one after another on
the same dataset, each against its own run alone: a variant and the library side by side in one
device call.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from offline_rl.cli.presets import sets_flag
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.gpu_sharing import default_thread_percentage, mps_control, mps_daemon
from offline_rl.core.resources import cores_per_run

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "d4rl_cql.py"
VARIANT_LAUNCHER = Path(__file__).resolve().parent / "critic_variants.py"
STEADY_FROM = 0.2
"""Fraction of a run's updates after which its rate is measured."""
TRAINING_WINDOWS = "update/critic_loss"
"""Logged when a statistics window closes (every --log-interval updates): the training-only rate."""
EVALUATIONS = "eval/return_mean"
"""Logged after each epoch's evaluation, at the update count: the whole-run rate (--whole-runs)."""


def steady_rate(log_root: Path, tag: str = TRAINING_WINDOWS) -> float:
    """Updates per second of the one run logged under `log_root`, between its first `tag` event after
    `STEADY_FROM` of its updates and its last (each event's step is the run's update count)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (event_file,) = log_root.rglob("events.out.tfevents.*")
    events = EventAccumulator(str(event_file.parent))
    events.Reload()
    marks = events.Scalars(tag)
    last = marks[-1]
    first = next(mark for mark in marks if mark.step >= STEADY_FROM * last.step)
    if last.step == first.step:
        more = "--updates" if tag == TRAINING_WINDOWS else "--whole-runs epochs"
        raise SystemExit(f"{log_root}: too few {tag} events to time; give more {more}")
    return (last.step - first.step) / (last.wall_time - first.wall_time)


def schedule(args: argparse.Namespace) -> list[str]:
    """Each timed run's epochs, updates and evaluations: one epoch of --updates with a one-episode
    evaluation at its end (not timed), or with --whole-runs the example's own schedule for that many
    epochs (flags after `--` still override either)."""
    if args.whole_runs is None:
        return one_epoch(args.updates)
    return ["--epoch", str(args.whole_runs)]


def one_epoch(updates: int) -> list[str]:
    """One epoch of `updates`, then a one-episode evaluation: training-only timing, and the warm-up."""
    return ["--epoch", "1", "--test-num", "1", "--step-per-epoch", str(updates)]


def run_group(count: int, args: argparse.Namespace, extra: list[str], root: Path, variant: str | None) -> list[float]:
    """`count` runs started together, each with its share of the CPU cores as a sweep gives its trials
    (unless `extra` sets --threads); their steady rates. Each run's messages go to a file of its own:
    a pipe nobody reads while another run is awaited could fill and stall the run writing to it."""
    threads = [] if sets_flag(extra, "--threads") else ["--threads", str(cores_per_run(count))]
    processes = []
    for seed in range(count):
        log_root = root / f"{count}-runs" / f"seed{seed}"
        log_root.parent.mkdir(parents=True, exist_ok=True)
        command = [
            *base_command(args, variant),
            *schedule(args),
            *("--seed", str(seed), "--logdir", str(log_root)),
            *threads,
            *extra,
        ]
        with log_root.with_suffix(".stderr").open("wb") as errors:
            processes.append((log_root, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)))
    for log_root, process in processes:
        if process.wait() != 0:
            errors = log_root.with_suffix(".stderr").read_text(errors="replace")[-2000:]
            raise SystemExit(f"a run of {count} failed (exit {process.returncode}):\n{errors}")
    tag = TRAINING_WINDOWS if args.whole_runs is None else EVALUATIONS
    return [steady_rate(log_root, tag) for log_root, _ in processes]


def base_command(args: argparse.Namespace, variant: str | None = None) -> list[str]:
    """d4rl_cql.py, through `critic_variants.py` when the runs compute their critics another way."""
    launcher = [] if variant in (None, "ensemble") else [str(VARIANT_LAUNCHER), variant]
    return [
        sys.executable,
        *launcher,
        str(EXAMPLE),
        *("--task", args.task, "--dataset-size", str(args.dataset_size), "--device", args.device),
    ]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4], help="group sizes, run one after another")
    parser.add_argument("--updates", type=int, default=60_000, help="updates of each run (training-only timing)")
    parser.add_argument(
        "--whole-runs",
        "--whole_runs",
        type=int,
        default=None,
        metavar="EPOCHS",
        help="time whole runs instead: EPOCHS epochs of the example's own schedule, each run's rate counting its "
        "evaluations and checkpoints (from its evaluations' times)",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--task", default="HalfCheetah-v4")
    parser.add_argument("--dataset-size", type=int, default=20_000)
    parser.add_argument("--mps", action="store_true", help="run each group of 2+ through a CUDA MPS daemon of its own")
    parser.add_argument(
        "--mps-thread-percentage",
        "--mps_thread_percentage",
        type=int,
        nargs="+",
        default=None,
        help="with --mps, each run's share of the multiprocessors in percent (100: no cap; default: as a sweep "
        "gives its trials, 200 / runs, at most 100); several: each group of 2+ runs once at each",
    )
    parser.add_argument(
        "--critic-variant",
        "--critic_variant",
        nargs="+",
        default=None,
        help="every run (the one alone too) computes its critics this way (benchmarks/critic_variants.py; "
        "ensemble: the library's); several: the table once per way",
    )
    return parser


def main() -> None:
    args, extra = parser().parse_known_args()
    extra = [flag for flag in extra if flag != "--"]
    if args.whole_runs is not None and args.whole_runs < 2:
        raise SystemExit("error: --whole-runs: expected at least 2 epochs (timed from one evaluation to another)")
    if args.mps_thread_percentage is not None and not args.mps:
        raise SystemExit("error: --mps-thread-percentage needs --mps")
    if args.critic_variant is not None:
        from critic_variants import VARIANTS  # torch and Tianshou: imported only when a variant is asked for

        unknown = [name for name in args.critic_variant if name not in VARIANTS]
        if unknown:
            raise SystemExit(f"error: --critic-variant: expected one of {', '.join(VARIANTS)}, got {unknown[0]!r}")
    if args.mps:
        try:
            for percentage in args.mps_thread_percentage or [100]:
                mps_control(percentage)
        except OfflineRLError as error:
            raise SystemExit(str(error)) from None
        print("groups of 2+ runs share the GPU through a CUDA MPS daemon", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.critic_variant or [None]:
            if variant == "ensemble":
                print("every run computes its critics as the library does (ensemble)", flush=True)
            elif variant is not None:
                print(f"every run computes its critics the {variant} way (benchmarks/critic_variants.py)", flush=True)
            time_groups(args, extra, Path(tmp) / (variant or "library"), variant)


def time_groups(args: argparse.Namespace, extra: list[str], root: Path, variant: str | None) -> None:
    """The warm-up run, then each group of runs timed and printed, relative to the run alone."""
    warmup = [*base_command(args, variant), *one_epoch(300)]
    warmup += ["--logdir", str(root / "warmup"), *extra]
    started = time.perf_counter()
    subprocess.run(warmup, check=True, stdout=subprocess.DEVNULL)  # the dataset, the compile cache
    print(f"warm-up run (dataset, compile cache): {time.perf_counter() - started:.0f} s", flush=True)
    alone: float | None = None
    for count, percentage in groups(args):
        with contextlib.ExitStack() as sharing:
            share = ""
            if percentage is not None:
                try:
                    sharing.enter_context(mps_daemon(root / f"mps-{count}-{percentage}", percentage))
                except OfflineRLError as error:
                    raise SystemExit(str(error)) from None
                share = f" through MPS, {percentage}% of the multiprocessors each"
            rates = run_group(count, args, extra, root / (f"mps-{percentage}" if percentage else "no-mps"), variant)
        total = sum(rates)
        if count == 1 and percentage is None:
            alone = total
        relative = f"{total / alone:.2f}× one run" if alone else ""
        counted = "" if args.whole_runs is None else ", evaluations included"
        print(
            f"{count} run(s){share}: {', '.join(f'{rate:.1f}' for rate in rates)} updates/s each{counted} "
            f"(median {statistics.median(rates):.1f}); total {total:.1f} updates/s {relative}",
            flush=True,
        )


def groups(args: argparse.Namespace) -> list[tuple[int, int | None]]:
    """(runs, MPS share in percent or None for no daemon) for each group to time, in order: one run
    alone without a daemon; with --mps, each larger group once per share asked for (by default the
    sweep's share for that many runs)."""
    timed: list[tuple[int, int | None]] = []
    for count in args.runs:
        if count == 1 or not args.mps:
            timed.append((count, None))
        else:
            timed += [
                (count, percentage) for percentage in args.mps_thread_percentage or [default_thread_percentage(count)]
            ]
    return timed


if __name__ == "__main__":
    main()
