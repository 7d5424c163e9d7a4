"""The start of a run: its device, threads, arithmetic and seeds, and the checkpoint it resumes from.

`start_session` reads the run's settings once, before any network is built: the device (`auto` is CUDA
where a GPU is visible), torch's threads (no more than the cores this process may use), the matrix
product precision, every random generator's seed, and for `--resume-path` the checkpoint whose
networks, optimisers, counters and random state the run restores."""

from __future__ import annotations

import json
import logging
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from offline_rl.algorithms.export.standalone import require_export_tools
from offline_rl.algorithms.layers import use_cpu_products
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import check_output
from offline_rl.core.resources import RunRegistry, busy_cores, core_budget, share_of_cores, tune_cpu_allocator
from offline_rl.runs.checkpoint import load_checkpoint, require_training_checkpoint, restore_algorithm
from offline_rl.runs.config import RunConfig, TorchConfig, resolve_matmul_precision
from offline_rl.runs.evaluation import counted
from offline_rl.runs.files import (
    FINE_TUNING_KEY,
    RUN_CHECKPOINT_FILE,
    RUN_DIVERGED_FILE,
    RUN_SUMMARY_FILE,
    SEED_BATCH_KEY,
)
from offline_rl.runs.video import require_display
from offline_rl.runs.wandb_logger import require_wandb

log = logging.getLogger(__name__)


@dataclass
class Session:
    """A started run: its settings, the device picked, and the checkpoint it resumes from, if any."""

    run: RunConfig
    device: str
    checkpoint: dict[str, Any] | None
    finished: dict[str, Any] | None = None
    """The summary of the run `--resume-path` continues, when it already trained to its end and this
    command asks for no more epochs: nothing to do, and its summary is not overwritten."""

    def restore(self, algorithm: torch.nn.Module, *, task: str | None = None) -> None:
        """Load the checkpoint's state (networks, optimisers, counters) into `algorithm`, if resuming;
        `task` names this run's task in the error when the networks do not fit."""
        if self.checkpoint is not None:
            restore_algorithm(algorithm, self.checkpoint, str(self.run.resume_path), task=task)


def start_session(run: RunConfig, *, then_online: bool = False) -> Session:
    """Pick the device, set threads, precision and seeds, read the checkpoint to resume from, and
    make sure the run's folder can be written before any data is loaded. `then_online`: the run goes on
    fine-tuning after its offline epochs (`offline_rl.runs.finetune`), which decides for itself whether
    anything is left to do."""
    device = pick_device(run.torch.device)
    check_run_folder(run)
    if run.export_policy:
        require_export_tools(run.export_policy)
    for flag, path in run.output_files().items():
        check_output(path, flag=flag)
    if run.save_video:
        check_output(run.save_video, flag="--save-video", directory=True)
    if run.render > 0:
        require_display()
    if run.trains:  # --watch and --export-policy log nothing
        require_wandb(run.logging)
    checkpoint = load_checkpoint(run.resume_path, device) if run.resume_path else None
    if checkpoint is not None and run.trains:
        require_training_checkpoint(checkpoint, str(run.resume_path), final_weights=then_online)
    configure_torch(device, run.torch, run.seed)
    finished = finished_run(run, checkpoint, say=not then_online)
    return Session(run=run, device=device, checkpoint=checkpoint, finished=finished)


def finished_run(run: RunConfig, checkpoint: dict[str, Any] | None, *, say: bool = True) -> dict[str, Any] | None:
    """`Session.finished`, saying so in one line (`say`). Without this a resumed finished run trained zero
    epochs and rewrote its summary with no last evaluation (the sweep's score of the trial). A fine-tuning
    checkpoint counts its own epochs (`offline_rl.runs.finetune`)."""
    if checkpoint is None or not run.trains or FINE_TUNING_KEY in checkpoint:
        return None
    final_weights = "epoch" not in checkpoint  # policy_last.pth, to fine-tune from (`require_training_checkpoint`)
    if not final_weights and int(checkpoint["epoch"]) < run.epoch:
        return None
    folder = Path(str(run.resume_path)).expanduser().resolve().parent
    batch = checkpoint.get(SEED_BATCH_KEY) if getattr(run, "num_seeds", 1) > 1 else None
    others = [(folder / other).resolve() for other in (batch or {}).get("folders", [])]
    if any(not (other / RUN_SUMMARY_FILE).is_file() and not (other / RUN_DIVERGED_FILE).is_file() for other in others):
        return None  # a seed of its batch stopped before its summary: the batch finishes them
    try:
        summary = json.loads((folder / RUN_SUMMARY_FILE).read_text())
    except (OSError, ValueError):  # stopped after its last checkpoint, before its summary: finish it
        summary = None
    if not isinstance(summary, dict):  # none this program wrote: finish the run, which writes one
        if final_weights:  # nothing to finish from: the run's own checkpoint knows where it is
            raise OfflineRLError(
                f"--resume-path {run.resume_path}: its run has no {RUN_SUMMARY_FILE} (it did not end here); "
                f"fine-tune from the {RUN_CHECKPOINT_FILE} beside it"
            )
        return None
    if not say:
        return summary
    log.info(
        f"the run in {folder} already trained its {run.epoch} epochs ({RUN_SUMMARY_FILE}); nothing to do: "
        f"give --epoch above {run.epoch} to train it further, or --watch to evaluate it"
    )
    return summary


def check_run_folder(run: RunConfig) -> None:
    """A training run writes logs and checkpoints under --logdir, a resumed one beside its checkpoint;
    `--watch` writes nothing but its `--save-video` videos, `--export-policy` its one file."""
    if not run.trains:
        return
    if run.resume_path:
        check_output(Path(run.resume_path).expanduser().resolve().parent, flag="--resume-path", directory=True)
    else:
        check_output(run.logdir, flag="--logdir", directory=True)


def cpu_threads(requested: int, running: Callable[[], list[int]] = list) -> tuple[int, str]:
    """The CPU threads to train with, and why. `requested` > 0 is taken as given, then a positive
    `OMP_NUM_THREADS` (the variable torch, OpenMP and job schedulers use for the same cap). Under a cgroup CPU
    quota, the cores it allows. Otherwise the cores other processes are not using right now: torch's
    threads spin while waiting for each other, so a thread that shares its core with another busy
    process stalls all of them. Either way no more than this run's share beside the other runs
    `running()` gives (their threads, 0 for one choosing now: `RunRegistry.others`), which runs
    started together cannot see in the load yet."""
    cores, quota_note = core_budget()
    if requested > 0:
        check_threads(requested, cores)
        return requested, "--threads, or the count of the run being resumed"
    from_environment = os.environ.get("OMP_NUM_THREADS", "")
    if from_environment.isdigit() and int(from_environment) > 0:  # a job scheduler's or the user's own cap
        return min(int(from_environment), cores), "OMP_NUM_THREADS; --threads to choose"
    busy = 0 if quota_note is not None else min(cores, round(busy_cores()))  # a quota's cores are its own
    others = running()  # read after the load's sampling: runs starting beside this one have registered
    share = share_of_cores(cores, others)
    free = max(1, cores - busy)
    if share < min(free, cores):
        return share, f"shared with {counted(len(others), 'other run')} on these {cores} cores; --threads to choose"
    if quota_note is not None:
        return cores, f"{quota_note}; --threads to choose"
    if free == cores:
        return cores, f"all {cores} cores are free; --threads to choose"
    return free, f"{busy} of {cores} cores are busy with other work; --threads to choose"


def check_threads(requested: int, cores: int) -> None:
    """More threads than cores only wait for each other (and a count in the thousands exhausts
    memory building them): one line, before any work."""
    if requested > cores:
        raise OfflineRLError(
            f"--threads {requested}: more than the {cores} cores this process may use; expected at most {cores} "
            "(a resumed run keeps its own count: give --threads to change it)"
        )


def configure_torch(device: str, settings: TorchConfig, seed: int) -> None:
    """Threads, float32 matmul precision, CPU products, CPU allocator and seeds, once per run. An `auto`
    precision and thread count are replaced in `settings` by the ones chosen for `device`, so that the
    run's record (run.json, which results tables group by, and its checkpoints, which a resume restores)
    names the arithmetic its products used."""

    if device == "cpu":
        registry = RunRegistry.default()
        registry.register()  # choosing: runs starting beside this one count it
        threads, why = cpu_threads(settings.threads, registry.others)
        registry.register(threads)
        torch.set_num_threads(threads)
        log.info(f"torch CPU threads: {threads} ({why})")
        settings.threads = threads  # recorded with the run: its resume takes the same sums
    elif settings.threads > 0:
        check_threads(settings.threads, core_budget()[0])
        torch.set_num_threads(settings.threads)
    settings.matmul_precision = resolve_matmul_precision(settings.matmul_precision, device)
    torch.set_float32_matmul_precision(settings.matmul_precision)
    use_cpu_products(settings.cpu_products)
    if device == "cpu":
        tune_cpu_allocator()
    seed_generators(seed)


def seed_generators(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators (every device's)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(flag: str) -> str:
    """`auto` means CUDA when a GPU is visible, else CPU; an explicit `cuda` without one is an error,
    and so is a GPU index this machine does not have (torch would fail later, mid-setup)."""

    if flag == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    match = re.fullmatch(r"cuda(?::(\d+))?", flag)
    if flag != "cpu" and match is None:
        raise OfflineRLError(f"--device {flag}: expected auto, cpu, cuda or cuda:N")
    if match is not None:
        if not torch.cuda.is_available():
            raise OfflineRLError(f"--device {flag}: no CUDA device is available here (use --device cpu or auto)")
        count = torch.cuda.device_count()
        if match.group(1) is not None and int(match.group(1)) >= count:
            raise OfflineRLError(
                f"--device {flag}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    return flag
