"""One trial, run to its end: an ordinary run of the example in a child process, resumed from its own
checkpoint when a previous attempt was killed, interrupted or crashed.

Both engines call `run_trial` (the local one in a thread per job, Ray as a task on any node), so a
trial behaves the same wherever it runs. Its folder holds the example's usual log tree, the child's
output (`output.log`) and `trial.json` (its status, attempt and process id, written atomically).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from offline_rl.core.files import write_json
from offline_rl.core.interrupts import STOPPED_STATUSES
from offline_rl.runs.files import (
    RUN_CHECKPOINT_FILE,
    RUN_FINAL_POLICY_FILE,
    RUN_FQE_FILE,
    RUN_SETTINGS_FILE,
    RUN_SUMMARY_FILE,
    diverged_reason,
    fqe_value,
)

TRIAL_FILE = "trial.json"
OUTPUT_FILE = "output.log"
EXIT_USER_ERROR = 2  # the examples' status for a mistake in their flags or data: retrying cannot help


@dataclass
class TrialOutcome:
    id: str
    status: str  # done | failed | interrupted
    attempts: int = 0  # processes started for this trial, by every run of the sweep (its output.log's count)
    resumed: bool = False
    message: str = ""
    score: float | None = None
    updates: int | None = None
    fqe: float | None = None  # its final policy's fitted Q evaluation (with the sweep's --fqe-updates)


def _finished_runs(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(folder, summary) of each run under `directory` that trained to its end (a readable summary)."""
    for path in sorted(directory.rglob(RUN_SUMMARY_FILE)):
        try:
            yield path.parent, json.loads(path.read_text())
        except (OSError, ValueError):
            continue


def finished_summary(directory: Path) -> dict[str, Any] | None:
    """The summary of a run under `directory` that trained to its end, if there is one."""
    return next((summary for _, summary in _finished_runs(directory)), None)


def finished_run_dir(directory: Path) -> Path | None:
    """The folder of that run (where its final policy and its estimate are), if there is one."""
    return next((folder for folder, _ in _finished_runs(directory)), None)


def diverged_message(directory: Path) -> str | None:
    """Why the run under `directory` stopped, when its training diverged (and was not resumed since); for a
    batch of seeds (several run folders), only when every seed's did: the others go on without it."""
    runs = sorted(path.parent for path in directory.rglob(RUN_SETTINGS_FILE))
    reasons = [diverged_reason(run) for run in runs]
    if not runs or any(reason is None for reason in reasons):
        return None
    return reasons[0]


def latest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.rglob(RUN_CHECKPOINT_FILE), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def score_of(summary: dict[str, Any]) -> float | None:
    last = summary.get("last") or {}
    value = last.get("normalized_score", last.get("return_mean"))
    return float(value) if value is not None else None


def done_outcome(trial_id: str, folder: Path, summary: dict[str, Any], *, resumed: bool = False) -> TrialOutcome:
    """A finished trial's outcome: score and updates from its run's summary, attempts from its log, and its
    fitted Q evaluation where it has one."""
    updates, run_dir = summary.get("total_updates"), finished_run_dir(folder)
    estimate = fqe_value(run_dir) if run_dir is not None else None
    return TrialOutcome(
        trial_id, "done", attempts_logged(folder), resumed, score=score_of(summary), updates=updates, fqe=estimate
    )


def _write_status(directory: Path, **status: Any) -> None:
    write_json(directory / TRIAL_FILE, status)


ATTEMPT_MARK = "[sweep] attempt "
STEP_MARK = "[sweep] "  # a step after training, which is not an attempt to train


def attempts_logged(directory: Path) -> int:
    """Processes started for the trial in `directory` so far, by any run of the sweep on any machine."""
    try:
        text = (directory / OUTPUT_FILE).read_text(errors="replace")
    except OSError:
        return 0
    return sum(line.startswith(ATTEMPT_MARK) for line in text.splitlines())


def _last_error(output: Path) -> str:
    try:
        lines = output.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("error: ")]
    return errors[-1].removeprefix("error: ") if errors else (lines[-1] if lines else "")


def _die_with_parent() -> None:
    """In the child: end when the thread that started it ends (a killed sweep or Ray worker), Linux only."""
    with contextlib.suppress(OSError, AttributeError):  # no libc.so.6 or no prctl: not Linux
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_trial(
    module: str,
    trial_id: str,
    arguments: Sequence[str],
    directory: str,
    *,
    per_invocation: Sequence[str] = (),
    max_retries: int = 2,
    fqe_updates: int = 0,
    cwd: str | None = None,
    environment: Mapping[str, str] | None = None,
    on_start: Callable[[subprocess.Popen], None] | None = None,
) -> TrialOutcome:
    """Run the example `module` with `arguments` into `directory` until it has trained to its end, then,
    given `fqe_updates`, estimate its final policy on its data (`estimate_final_policy`).

    A finished trial (its `summary.json` exists) trains no further, and one whose training
    diverged (`diverged.json`) starts nothing: with the same flags it would diverge again, a resume
    being exact, so it stays failed until its folder is deleted. Otherwise each attempt starts the
    example afresh or, when the folder holds a checkpoint, as `--resume-path CHECKPOINT`, which
    restores the run's own settings and continues to its original end. Exit status 2 (a user error)
    fails at once with the example's one-line message; 130 or 143 (told to stop: Ctrl-C, or SIGTERM
    from a scheduler ending the job) stops; anything else (killed, crashed) is retried up to
    `max_retries` times. `environment` adds to the example's environment (the GPU a trial is given).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    child = functools.partial(
        _run_child, module, folder, trial_id=trial_id, cwd=cwd, environment=environment, on_start=on_start
    )
    trial = TrialProcesses(trial_id, list(arguments), folder, list(per_invocation), child)
    outcome = _train(trial, max_retries)
    if outcome.status == "done" and fqe_updates:
        outcome = estimate_final_policy(outcome, trial, fqe_updates)
        _write_status(folder, **asdict(outcome))
    return outcome


@dataclass
class TrialProcesses:
    """What starts a trial's child processes: its flags, its folder, and `start(command, attempt=...)`,
    which runs the example with `command` there and returns its exit status."""

    id: str
    arguments: list[str]
    folder: Path
    per_invocation: list[str]
    start: Callable[..., int]


def _train(trial: TrialProcesses, max_retries: int) -> TrialOutcome:
    trial_id, arguments, folder, per_invocation = trial.id, trial.arguments, trial.folder, trial.per_invocation
    summary = finished_summary(folder)
    if summary is not None:
        return done_outcome(trial_id, folder, summary)
    diverged = diverged_message(folder)
    if diverged is not None:
        message = f"{diverged} [diverged in an earlier run of the sweep, not run again: delete {folder} to retry it]"
        outcome = TrialOutcome(trial_id, "failed", attempts_logged(folder), False, message)
        _write_status(folder, **asdict(outcome))
        return outcome
    attempts, resumed = 0, False  # attempts: by this call, for --max-retries
    while True:
        checkpoint = latest_checkpoint(folder)
        if checkpoint is not None:
            command = ["--resume-path", str(checkpoint), *per_invocation]
            resumed = True
        else:
            command = [*arguments, "--logdir", str(folder), *per_invocation]
        attempts += 1
        code = trial.start(command, attempt=attempts_logged(folder) + 1)
        total = attempts_logged(folder)
        if code == 0:
            outcome = done_outcome(trial_id, folder, finished_summary(folder) or {}, resumed=resumed)
        elif code == EXIT_USER_ERROR:
            outcome = TrialOutcome(trial_id, "failed", total, resumed, _last_error(folder / OUTPUT_FILE))
        elif code in STOPPED_STATUSES:  # told to stop (Ctrl-C, or a scheduler's SIGTERM): not retried
            outcome = TrialOutcome(trial_id, "interrupted", total, resumed, "interrupted")
        elif attempts > max_retries:
            message = f"exited with status {code} in each of {attempts} attempts; see {folder / OUTPUT_FILE}"
            outcome = TrialOutcome(trial_id, "failed", total, resumed, message)
        else:
            continue  # killed or crashed: resume from its checkpoint
        _write_status(folder, **asdict(outcome))
        return outcome


def estimate_final_policy(outcome: TrialOutcome, trial: TrialProcesses, fqe_updates: int) -> TrialOutcome:
    """The finished trial's final policy (`policy_last.pth`, what its headline score played) estimated by
    fitted Q evaluation on the run's own data, in a child process of the example
    (`--fqe-updates N --fqe-output fqe.json`), once: a trial whose `fqe.json` exists keeps it."""
    folder, run_dir = trial.folder, finished_run_dir(trial.folder)
    if run_dir is None or (run_dir / RUN_FQE_FILE).is_file():
        return outcome  # estimated before (`done_outcome` read it)
    estimate_file = run_dir / RUN_FQE_FILE
    policy = run_dir / RUN_FINAL_POLICY_FILE
    if not policy.is_file():
        return replace(outcome, status="failed", message=f"{policy}: missing, so its final policy cannot be estimated")
    command = ["--resume-path", str(policy), "--fqe-updates", str(fqe_updates), "--fqe-output", str(estimate_file)]
    command += [*fqe_flags(trial.arguments), *trial.per_invocation]
    code = trial.start(command, attempt="fitted Q evaluation")
    if code == 0:
        return replace(outcome, fqe=fqe_value(run_dir))
    if code in STOPPED_STATUSES:
        return replace(outcome, status="interrupted", message="interrupted during its fitted Q evaluation")
    reason = _last_error(folder / OUTPUT_FILE) if code == EXIT_USER_ERROR else f"exited with status {code}"
    return replace(outcome, status="failed", message=f"fitted Q evaluation: {reason}; see {folder / OUTPUT_FILE}")


def fqe_flags(arguments: Sequence[str]) -> list[str]:
    """The trial's own `--fqe-*` flags with their values (a sweep may set FQE's learning rate or layers):
    they belong to one invocation, so its estimate is given them again."""
    picked, taking = [], False
    for argument in arguments:
        if argument.startswith("--"):
            taking = argument.startswith("--fqe-")
        if taking:
            picked.append(argument)
    return picked


def _run_child(
    module: str,
    folder: Path,
    command: list[str],
    *,
    trial_id: str,
    attempt: int | str,
    cwd: str | None,
    environment: Mapping[str, str] | None,
    on_start: Callable[[subprocess.Popen], None] | None,
) -> int:
    """`python -m module COMMAND` for the trial in `folder`, its output appended to the trial's log
    under a line naming the attempt; its exit status."""
    with (folder / OUTPUT_FILE).open("a") as output:
        output.write(f"\n{ATTEMPT_MARK if isinstance(attempt, int) else STEP_MARK}{attempt}: {' '.join(command)}\n")
        output.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", module, *command],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(environment or {})},
            start_new_session=True,  # Ctrl-C in the terminal reaches the sweep, which stops trials itself
            preexec_fn=_die_with_parent,
        )
        _write_status(folder, id=trial_id, status="running", pid=process.pid, started=time.time())
        if on_start is not None:
            on_start(process)
        return process.wait()
