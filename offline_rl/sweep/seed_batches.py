"""Trials of a sweep that differ only in their seed, trained as one process (`--num-seeds`): their seeds
in one batched update (`offline_rl.algorithms.seeds`), each seed's run folder the one its own trial would
have written, so the sweep's table is the table of separate trials.

A batch is a run of consecutive seeds (the program's `--num-seeds` trains --seed, --seed + 1, ...); it
writes its seeds' run folders under its first trial's folder, and each trial's outcome (done with its
seed's last evaluation, diverged, failed or interrupted with the batch) is read from its own seed's
folder there. `--no-seed-batches` runs every trial alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from offline_rl.runs.files import RUN_DIVERGED_FILE, RUN_SUMMARY_FILE, diverged_reason
from offline_rl.sweep.spec import Trial
from offline_rl.sweep.trial import TrialOutcome, attempts_logged, score_of

SEED_AXIS = "seed"
WANDB_NAME = "--wandb-name"


def seed_batches(trials: Sequence[Trial]) -> list[list[Trial]]:
    """The trials in batches: those whose grid values are equal but for the seed, with consecutive
    seeds, each batch in seed order; a trial with no such neighbour, or that trains `alone`, is a batch of
    one. The batches keep the order of their first trials."""
    keyed: dict[tuple[Any, ...], list[Trial]] = {}
    for trial in trials:
        values = dict(trial.values)
        if not isinstance(values.get(SEED_AXIS), int) or trial.alone:
            keyed[("alone", trial.id)] = [trial]
            continue
        key = tuple((name, repr(value)) for name, value in trial.values if name != SEED_AXIS)
        keyed.setdefault(key, []).append(trial)
    batches = []
    for members in keyed.values():
        members = sorted(members, key=seed_of)
        run: list[Trial] = []
        for trial in members:
            if run and seed_of(trial) != seed_of(run[-1]) + 1:
                batches.append(run)
                run = []
            run.append(trial)
        batches.append(run)
    first = {trial.id: index for index, trial in enumerate(trials)}
    return sorted(batches, key=lambda batch: first[batch[0].id])


def seed_of(trial: Trial) -> int:
    return int(dict(trial.values).get(SEED_AXIS, 0))


def batch_arguments(batch: Sequence[Trial]) -> list[str]:
    """The first trial's flags (its --seed the batch's first), and the batch's --num-seeds. A W&B run name
    the sweep gave the first trial is left out: each seed's W&B run is named as a run's own is."""
    arguments = list(batch[0].arguments)
    if WANDB_NAME in arguments:
        at = arguments.index(WANDB_NAME)
        del arguments[at : at + 2]
    return [*arguments, "--num-seeds", str(len(batch))]


def seed_run(directory: Path, seed: int, file_name: str) -> Path | None:
    """`file_name` of seed `seed`'s run folder under a batch's `directory` (<task>/<algo>/<seed>/<time>)."""
    found = sorted(path for path in directory.rglob(file_name) if path.parent.parent.name == str(seed))
    return found[-1] if found else None


def member_outcome(batch: TrialOutcome, directory: Path, trial: Trial) -> TrialOutcome:
    """The outcome of `trial` from its seed's run folder in the batch's `directory`: done with its own
    score, failed when its training diverged, else the batch's (failed or interrupted)."""
    seed, attempts = seed_of(trial), attempts_logged(directory)
    ended = seed_ended(directory, seed)
    if isinstance(ended, dict):
        updates = ended.get("total_updates")
        return TrialOutcome(trial.id, "done", attempts, batch.resumed, score=score_of(ended), updates=updates)
    if isinstance(ended, str):
        return TrialOutcome(trial.id, "failed", attempts, batch.resumed, ended)
    if batch.status == "done":  # the batch ended, this seed without a summary
        return TrialOutcome(trial.id, "failed", attempts, batch.resumed, f"no summary of seed {seed} in {directory}")
    return replace(batch, id=trial.id)


def seed_ended(directory: Path, seed: int) -> dict[str, Any] | str | None:
    """How seed `seed` of the batch in `directory` ended: its summary, why its training diverged, or None
    (still to train)."""
    summary = seed_run(directory, seed, RUN_SUMMARY_FILE)
    if summary is not None:
        return json.loads(summary.read_text())
    diverged = seed_run(directory, seed, RUN_DIVERGED_FILE)
    return diverged_reason(diverged.parent) if diverged is not None else None


def finished_batch(directory: Path, batch: Sequence[Trial]) -> list[TrialOutcome] | None:
    """Every trial's outcome when the batch in `directory` has ended for all its seeds (each with a
    summary, or diverged), else None."""
    if not directory.is_dir() or any(seed_ended(directory, seed_of(trial)) is None for trial in batch):
        return None
    ended = TrialOutcome(batch[0].id, "done")
    return [member_outcome(ended, directory, trial) for trial in batch]
