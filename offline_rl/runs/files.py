"""The files of a run's folder: where a new run's folder goes, the names of what it holds, and
readers of the small ones (without torch, for tables and sweeps)."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

RUN_SETTINGS_FILE = "run.json"
"""A run's settings and dataset (JSON), written by the training loop when it starts: readable without torch."""

RUN_SUMMARY_FILE = "summary.json"
"""Written when a run has trained to its end: the figures of its summary line."""

RUN_OFFLINE_SUMMARY_FILE = "summary-offline.json"
"""A run that fine-tunes online: its offline phase's summary, moved aside as fine-tuning starts, so that
`summary.json` says the whole run ended (sweeps and results tables read it so)."""

RUN_DIVERGED_FILE = "diverged.json"
"""Written when a run stopped because its training diverged (NaN or inf): the one-line reason. A resumed
run removes it; tables count such runs and leave them out of the scores."""

RUN_CHECKPOINT_FILE = "checkpoint.pth"
"""Written after every epoch: where the run stopped, what `--resume-path` continues training from."""

SEED_BATCH_KEY = "seed_batch"
"""Checkpoint field of a seed of a batched run (--num-seeds): the batch's `seeds` and, relative to this seed's
folder, its `folders`, in seed order."""

FINE_TUNING_KEY = "fine_tuning"
"""A fine-tuning phase's checkpoints and summary (`offline_rl.runs.finetune`): where its offline phase
ended, its update count and last evaluation."""

RUN_NEXT_CHECKPOINT_FILE = ".checkpoint-next.pth"
"""A seed of a batch (--num-seeds): its checkpoint of the round under way, renamed to `checkpoint.pth` once
every seed's is written, so that a kill between two seeds' writes resumes every seed from one point."""

RUN_BEST_POLICY_FILE = "policy.pth"
"""Written at every new best trained evaluation (a full checkpoint): the optimistic best, never the headline."""

RUN_FINAL_POLICY_FILE = "policy_last.pth"
"""The policy where training ended (a full checkpoint), written with the summary: what the last
evaluation, the headline score, played."""

RUN_FQE_FILE = "fqe.json"
"""Fitted Q evaluation of the run's final policy on its data (`--fqe-output`; a sweep's `--fqe-updates`
writes it beside each trial's summary): `fqe_value` is the estimated discounted return."""


def fqe_value(run_dir: Path) -> float | None:
    """The estimate in `run_dir`'s `RUN_FQE_FILE`, if it holds a finite one."""
    try:
        value = float(json.loads((run_dir / RUN_FQE_FILE).read_text())["fqe_value"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if math.isfinite(value) else None


def diverged_reason(run_dir: Path) -> str | None:
    """Why the run in `run_dir` stopped, when its training diverged and it has not finished since
    (`RUN_DIVERGED_FILE`); None otherwise. Read by the tables and by sweeps."""
    if (run_dir / RUN_SUMMARY_FILE).is_file():
        return None
    try:
        record = json.loads((run_dir / RUN_DIVERGED_FILE).read_text())
    except OSError:
        return None
    except ValueError:
        return "diverged"
    return str(record.get("message") or "diverged") if isinstance(record, dict) else "diverged"


def new_log_path(logdir: str, task: str, algo_name: str, seed: int) -> Path:
    """`<logdir>/<task>/<algo>/<seed>/<timestamp>`, as Tianshou's examples lay out their runs.

    The folder is claimed (created, never reused): two runs of one seed started in the same second
    get `<timestamp>` and `<timestamp>-2` rather than writing over each other's checkpoints."""
    stamp = datetime.datetime.now().strftime("%y%m%d-%H%M%S")
    parent = Path(logdir) / task.replace("/", "_") / algo_name / str(seed)
    parent.mkdir(parents=True, exist_ok=True)
    path, attempt = parent / stamp, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            attempt += 1
            path = parent / f"{stamp}-{attempt}"
