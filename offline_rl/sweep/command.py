"""The `sweep` command: its settings, and running a grid of trials to a results table."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from offline_rl.cli.flags import parse_config
from offline_rl.cli.presets import sets_flag
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import check_output
from offline_rl.core.gpu_sharing import default_thread_percentage, mps_daemon, visible_gpus
from offline_rl.core.interrupts import exit_status
from offline_rl.core.resources import cores_per_run
from offline_rl.core.settings import check_ranges, setting
from offline_rl.results.command import write_results
from offline_rl.runs.files import RUN_DIVERGED_FILE, RUN_FQE_FILE
from offline_rl.sweep.engines import TrialJob, run_locally, run_on_ray
from offline_rl.sweep.seed_batches import batch_arguments, finished_batch, seed_batches
from offline_rl.sweep.spec import (
    EXAMPLES,
    SweepSpec,
    check_axes,
    check_name,
    load_spec,
    parse_assignments,
    with_overrides,
)
from offline_rl.sweep.state import SweepState
from offline_rl.sweep.trial import done_outcome, finished_run_dir, finished_summary

PROG = "python -m offline_rl.sweep"
DESCRIPTION = (
    "Run a grid of example runs (seeds x datasets x settings) locally or on Ray, then write the results tables "
    "and plots. Re-run the same command to continue: finished trials are skipped, interrupted ones resume."
)
EXIT_FAILED_TRIALS = 1


@dataclass
class SweepConfig:
    FLAG_GROUP: ClassVar[str] = "sweep"

    sweep_file: str | None = setting(None, "a sweep YAML file (example, set, grid)", positional=True)
    example: str | None = setting(None, f"the example every trial runs: {', '.join(EXAMPLES)}")
    grid: list[str] = setting([], "KEY=V1,V2,...: one grid axis (repeat the flag for more)", repeatable=True)
    fixed: list[str] = setting([], "KEY=VALUE: a flag every trial gets (repeatable)", flag="--set", repeatable=True)
    example_config: str | None = setting(None, "the example's own --config preset file, for every trial")
    name: str | None = setting(None, "the sweep's folder name (default: the file's name, or the example's)")
    logdir: str = setting("log/sweeps", "sweeps live in LOGDIR/NAME/TRIAL-ID")
    jobs: int = setting(
        0, "trials at once on this machine (0: one per CPU core pair; 2 per GPU, 4 with --mps)", minimum=0
    )
    mps: bool = setting(
        False,
        ("trials on a GPU share it through a CUDA MPS daemon of the sweep's own, so their kernels run side by side"),
    )
    mps_thread_percentage: int | None = setting(
        None,
        "with --mps, each trial's share of a GPU's multiprocessors, in percent (none: 200 / trials per GPU)",
        minimum=1,
        maximum=100,
    )
    ray_address: str | None = setting(
        None, ("run trials as Ray tasks: auto, ray://HOST:PORT, or local (a Ray runtime here); default $RAY_ADDRESS")
    )
    cpus_per_trial: float = setting(1.0, "CPUs Ray reserves per trial", above=0)
    gpus_per_trial: float = setting(0.0, "GPUs Ray reserves per trial (0.25 packs four on a GPU)", minimum=0)
    max_retries: int = setting(2, "restarts of a killed or crashed trial (each resumes from its checkpoint)", minimum=0)
    fqe_updates: int = setting(
        0,
        "after each trial, estimate its final policy by fitted Q evaluation with this many updates (0: none)",
        details=(
            "fqe.json goes beside each trial's summary; the table adds the estimates and the setting "
            "they pick without the env. Re-running a finished sweep with it estimates what it lacks."
        ),
        minimum=0,
    )
    seed_batches: bool = setting(
        True,
        "trials that differ only in their consecutive seeds train as one process, their seeds in one batched "
        "update (--num-seeds); --no-seed-batches runs each alone",
        details="Not with --fqe-updates, which estimates one trial's policy at a time.",
    )
    last_k: int = setting(1, "final score = mean of each run's last k evaluations (1: the last)", minimum=1)
    dry_run: bool = setting(False, "list the trials and start none")

    def validate(self) -> None:
        check_ranges(self)
        if self.mps and self.ray_address:
            raise OfflineRLError(
                "--mps: the local engine's option; on Ray, start the daemon on each GPU node "
                "(nvidia-cuda-mps-control -d) before its Ray worker"
            )
        if self.mps_thread_percentage is not None and not self.mps:
            raise OfflineRLError("--mps-thread-percentage: applies to trials sharing a GPU through --mps; add --mps")


def build_spec(config: SweepConfig) -> Any:
    fixed = parse_assignments(config.fixed, "--set", lists=False)
    grid = parse_assignments(config.grid, "--grid", lists=True)
    if config.sweep_file:
        spec = with_overrides(load_spec(config.sweep_file), fixed, grid)
        if config.example and config.example != spec.example:
            raise OfflineRLError(f"--example {config.example}: {config.sweep_file} runs {spec.example}")
    else:
        if not config.example:
            raise OfflineRLError(f"give a sweep file or --example ({', '.join(EXAMPLES)}) with --grid axes")
        spec = SweepSpec(name=config.example, example=config.example, fixed=fixed, grid=grid)
    if config.name:
        spec.name = config.name
    check_name(spec.name, "--name" if config.name else spec.source)
    if config.example_config:
        spec.config = config.example_config
    return spec


def default_jobs(mps: bool, gpus: int) -> int:
    """One trial per CPU core pair; on a machine with `gpus` GPUs two per GPU, four through MPS, where
    runs share a GPU best (docs: sharing a GPU). Two without MPS still pay: while one trial evaluates
    on the CPU, the other trains."""
    return (4 if mps else 2) * gpus if gpus else cores_per_run(2)


class Display:
    """Trials done, running, failed and queued, and the scores so far: a bar on a terminal, plain lines
    in a log file."""

    def __init__(self, state: Any, total: int, already_done: int) -> None:
        from offline_rl.core.progress import progress_bar  # tqdm: kept out of --help's start

        self.state = state
        self.bar = progress_bar(total=total, desc=f"sweep {state.header['name']}", unit="trial", initial=already_done)
        self.refresh()

    def refresh(self) -> None:
        scores = self.state.scores()
        figures = f"mean {sum(scores) / len(scores):.1f}, best {max(scores):.1f}" if scores else "no score yet"
        self.bar.set_postfix_str(
            f"running {self.state.count('running')}, failed {self.state.count('failed')}, "
            f"queued {self.state.count('queued')}; {figures}",
            refresh=sys.stderr.isatty(),  # in a log file: the trial lines and the bar's periodic line
        )

    def note(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)

    def finished(self, outcome: Any) -> None:
        """The trial's line first, then the bar with counts that already include it."""
        if outcome.status == "done":
            how = " (resumed from its checkpoint)" if outcome.resumed else ""
            score = f"score {outcome.score:.2f}" if outcome.score is not None else "no evaluation"
            estimate = f", FQE estimate {outcome.fqe:.2f}" if outcome.fqe is not None else ""
            self.note(f"trial {outcome.id}: done{how}, {score}{estimate}")
        elif outcome.status == "failed":
            self.note(f"trial {outcome.id}: failed: {outcome.message}")
        self.refresh()
        if outcome.status == "done":
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(SweepConfig(), argv, prog=PROG, description=DESCRIPTION)
    config.ray_address = config.ray_address or os.environ.get("RAY_ADDRESS") or None
    spec = build_spec(config)

    check_axes(spec)
    trials = spec.trials()  # every trial's flags parsed by the example: nothing starts on a bad sweep
    folder = Path(config.logdir) / spec.name
    if config.dry_run:
        for trial in trials:
            print(f"{trial.id}: {' '.join(trial.arguments)}")
        batches = trial_batches(config, trials)
        if len(batches) < len(trials):
            print(f"as {len(batches)} processes: the seeds of a setting train as one batch (--no-seed-batches: apart)")
        print(f"{len(trials)} trials in {folder}; nothing started (--dry-run)")
        return 0
    check_output(folder, flag="--logdir", directory=True)
    return run_sweep(config, spec, trials, folder, EXAMPLES[spec.example].main_module)


def trial_batches(config: SweepConfig, trials: list[Any]) -> list[list[Any]]:
    """The processes the trials train as: the seeds of a setting as one batch (`--no-seed-batches`, and
    `--fqe-updates`, which estimates one trial's policy at a time: each trial alone)."""
    if config.seed_batches and not config.fqe_updates:
        return seed_batches(trials)
    return [[trial] for trial in trials]


def _flag_given(trials: list[Any], flag: str) -> bool:
    """Whether some trial sets `flag` itself: the sweep then leaves that choice (threads, device) to it."""

    return any(sets_flag(trial.arguments, flag) for trial in trials)


def lacks_estimate(directory: Path, fqe_updates: int) -> bool:
    """Whether the finished trial in `directory` still needs the fitted Q evaluation `--fqe-updates` asks for."""

    run_dir = finished_run_dir(directory)
    return bool(fqe_updates) and run_dir is not None and not (run_dir / RUN_FQE_FILE).is_file()


def run_sweep(config: SweepConfig, spec: Any, trials: list[Any], folder: Path, module: str) -> int:
    if config.ray_address:  # Ray gives each task its GPUs itself
        return run_trials(config, spec, trials, folder, module, workers=0, gpus=[])

    gpus = visible_gpus()
    workers = config.jobs or default_jobs(config.mps, len(gpus))
    # a trial that names its device keeps it: a GPU of the sweep's choosing could make `cuda:1` vanish
    spread = gpus if len(gpus) > 1 and not _flag_given(trials, "--device") else []
    runs_per_gpu = math.ceil(workers / max(1, len(gpus)))
    # first: a daemon that cannot start is one line, before anything else
    with sharing_gpus(config.mps, config.mps_thread_percentage, runs_per_gpu):
        return run_trials(config, spec, trials, folder, module, workers, spread)


def run_trials(
    config: SweepConfig, spec: Any, trials: list[Any], folder: Path, module: str, workers: int, gpus: list[str]
) -> int:
    """`gpus`: the GPUs to spread local trials over, one per trial (none: every trial sees what the
    sweep sees)."""

    start = time.time()
    state = SweepState(folder, spec, trials)
    threads = max(1, int(config.cpus_per_trial)) if config.ray_address else cores_per_run(workers)
    per_invocation = [] if _flag_given(trials, "--threads") else ["--threads", str(threads)]
    jobs, skipped, to_estimate = [], 0, 0
    for batch in trial_batches(config, trials):
        if len(batch) > 1:
            directory = folder / batch[0].id
            ended = finished_batch(directory, batch)
            if ended is not None:
                for outcome in ended:
                    state.finished(outcome)
                skipped += len(batch)
                continue
            arguments, where_to = batch_arguments(batch), str(directory.resolve())
            jobs.append(
                TrialJob(
                    module, batch[0].id, arguments, where_to, per_invocation, config.max_retries, os.getcwd(),
                    batch=tuple(batch),
                )
            )  # fmt: skip
            continue
        (trial,) = batch
        directory = folder / trial.id
        summary = finished_summary(directory) if directory.is_dir() else None
        if summary is not None and not lacks_estimate(directory, config.fqe_updates):  # nothing to start
            state.finished(done_outcome(trial.id, directory, summary))
            skipped += 1
            continue
        to_estimate += summary is not None
        arguments, where_to = list(trial.arguments), str(directory.resolve())
        jobs.append(
            TrialJob(
                module,
                trial.id,
                arguments,
                where_to,
                per_invocation,
                config.max_retries,
                os.getcwd(),
                config.fqe_updates,
            )
        )
    where = f"Ray at {config.ray_address}" if config.ray_address else f"{workers} at a time on this machine"
    if gpus:
        where += f", spread over GPUs {','.join(gpus)}"
    estimating = f" ({to_estimate} to estimate)" if to_estimate else ""
    batched = sum(len(job.batch) for job in jobs)
    runs = sum(len(job.ids) for job in jobs) - to_estimate
    batches = sum(1 for job in jobs if job.batch)
    together = f" ({batched} of them as {batches} batch{'es' if batches > 1 else ''} of seeds)" if batched else ""
    counts = f"{skipped + to_estimate} finished before{estimating}, {runs} to run{together}, {where}"
    print(f"sweep {spec.name}: {len(trials)} trials in {folder} ({counts})")
    display = Display(state, len(trials), skipped)

    def started(trial_id: str) -> None:
        state.running(trial_id)
        display.refresh()

    def finished(outcome: Any) -> None:
        state.finished(outcome)
        display.finished(outcome)

    try:
        if jobs and config.ray_address:
            run_on_ray(
                jobs,
                config.ray_address,
                cpus_per_trial=config.cpus_per_trial,
                gpus_per_trial=config.gpus_per_trial,
                started=started,
                finished=finished,
            )
        elif jobs:
            run_locally(jobs, workers, started, finished, gpus=gpus)
    except KeyboardInterrupt as interrupt:
        display.close()
        print(f"interrupted: trials stopped at their last checkpoint; run the same command to continue ({state.path})")
        raise SystemExit(exit_status(interrupt)) from None
    display.close()
    return report(config, spec, state, folder, time.time() - start)


@contextlib.contextmanager
def sharing_gpus(mps: bool, thread_percentage: int | None, runs_per_gpu: int) -> Iterator[None]:
    """With `--mps`, the trials started inside run through one MPS daemon, stopped when they end, each
    on `thread_percentage` of a GPU's multiprocessors (none: the share that suits `runs_per_gpu`).
    Its sockets go in a short temporary folder: a sweep's log folder can be too long a path for one."""
    if not mps:
        yield
        return

    share = default_thread_percentage(runs_per_gpu) if thread_percentage is None else thread_percentage
    with tempfile.TemporaryDirectory(prefix="mps-") as short, mps_daemon(Path(short), share):
        print(
            f"trials share each GPU through a CUDA MPS daemon of this sweep's own, each on up to {share}% of its "
            f"multiprocessors (its folders: {short})"
        )
        yield


def report(config: SweepConfig, spec: Any, state: Any, folder: Path, seconds: float) -> int:
    done, failed = state.count("done"), state.count("failed")
    resumed = sum(1 for entry in state.trials.values() if entry.get("resumed"))
    files = ""
    if done or next(folder.rglob(RUN_DIVERGED_FILE), None) is not None:  # a diverged trial has a row too
        try:
            result = write_results([folder], folder, last_k=config.last_k)
            print(result["table"], end="")
            files = "; results: " + ", ".join(str(path) for path in result["files"].values())
        except OfflineRLError as error:
            files = f"; no results table ({error})"
    print(f"sweep {spec.name}: {done} done ({resumed} resumed), {failed} failed in {seconds:.0f} s{files}")
    return EXIT_FAILED_TRIALS if failed else 0
