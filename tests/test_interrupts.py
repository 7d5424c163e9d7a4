"""SIGTERM (a scheduler ending a job: Slurm, Kubernetes, `timeout`) stops a command as Ctrl-C does:
what it has is kept, it says how to go on, and it exits with 143."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import forked
from conftest import REPO_ROOT, script_env
from offline_rl.core.interrupts import (
    EXIT_TERMINATED,
    Terminated,
    interrupts_between_steps,
    interrupts_held_during,
    sigterm_stops_like_ctrl_c,
)


@pytest.fixture
def sigterm_stops() -> Iterator[None]:
    with sigterm_stops_like_ctrl_c():
        yield
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back


def test_sigterm_raises_a_keyboard_interrupt_once_installed(sigterm_stops: None) -> None:
    with pytest.raises(Terminated) as raised:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs at the next bytecode
    assert isinstance(raised.value, KeyboardInterrupt)  # every `except KeyboardInterrupt` handles it


def test_sigterm_waits_for_the_step_boundary_and_a_second_one_does_not(sigterm_stops: None) -> None:
    with interrupts_between_steps() as stop_if_interrupted:
        stop_if_interrupted()
        os.kill(os.getpid(), signal.SIGTERM)  # arrives "inside a step": deferred
        with pytest.raises(Terminated):
            stop_if_interrupted()
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)  # again: at once
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM).__name__ == "raise_terminated"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_the_handler_sigterm_is_left_alone() -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with interrupts_between_steps():
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_ctrl_c_ignored_as_in_a_background_job_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # how a script's shell starts `command &`
    with interrupts_between_steps() as stop_if_interrupted:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
        stop_if_interrupted()  # nothing held: the step goes on
    held = interrupts_held_during(lambda: signal.raise_signal(signal.SIGINT))
    held()  # returns: nothing held, nothing raised
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _start(args: list[str], cwd: Path) -> forked.Popen:
    return forked.Popen(
        [sys.executable, "-u", *args],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _terminate_when(
    process: forked.Popen, marker: str, *, after_s: float = 0.0, timeout: float = 300
) -> tuple[str, str]:
    """Read stdout until `marker` appears, send SIGTERM `after_s` later, and return (stdout, stderr)."""
    seen = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    for line in process.stdout:
        seen.append(line)
        if marker in line:
            time.sleep(after_s)
            process.send_signal(signal.SIGTERM)
            break
        assert time.monotonic() < deadline, "".join(seen)
    out, err = process.communicate(timeout=120)
    return "".join(seen) + out, err


def test_a_collection_ended_by_sigterm_keeps_its_steps_and_continues(tmp_path: Path) -> None:
    output = tmp_path / "cartpole.hdf5"
    flags = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "3000000"]
    flags += ["--training-num", "2", "--num-quantiles", "8", "--save-buffer-name", str(output)]
    collection = _start([str(REPO_ROOT / "examples/atari_qrdqn.py"), *flags], tmp_path)
    out, err = _terminate_when(collection, "playing with an untrained policy", after_s=1.5)
    assert collection.returncode == EXIT_TERMINATED, err
    assert "kept in" in out and "run the same command again to continue" in out, out
    assert (tmp_path / "cartpole.hdf5.parts").is_dir() and not output.exists()
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM): no output was left half-written"


@pytest.mark.parametrize(
    "filming",
    [
        ["--watch", "--save-video", "videos"],
        ["--epoch", "1", "--step-per-epoch", "100", "--buffer-size", "1000", "--video-interval", "1"],
    ],
    ids=["watch", "training"],
)
def test_a_filmed_evaluation_ended_by_sigterm_leaves_no_half_video(filming: list[str], tmp_path: Path) -> None:
    flags = ["--task", "PongNoFrameskip-v4", "--test-num", "1", *filming]
    run = _start([str(REPO_ROOT / "examples/atari_qrdqn.py"), *flags], tmp_path)
    deadline = time.monotonic() + 120
    while not (staging := list(tmp_path.rglob(".*.part.mp4"))):  # an episode being filmed
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == EXIT_TERMINATED, err
    assert err.strip().splitlines()[-1].startswith("terminated (SIGTERM)"), err
    assert not list(staging[0].parent.iterdir())


@pytest.mark.parametrize("code", [130, 143])
def test_a_sweep_trial_told_to_stop_is_not_retried(code: int, tmp_path: Path) -> None:
    """A scheduler ending the job sends SIGTERM to every process: a trial that stops on it is
    interrupted (resumed by the next run of the sweep), not a crash to retry at once."""
    from offline_rl.sweep.trial import run_trial

    (tmp_path / "stops.py").write_text(f"import sys\nsys.exit({code})\n")
    outcome = run_trial("stops", "t", [], str(tmp_path / "trial"), max_retries=2, cwd=str(tmp_path))
    assert (outcome.status, outcome.attempts) == ("interrupted", 1)


FLAKY_TRIAL = """
import json, os, pathlib, sys
args = sys.argv[1:]
if "--resume-path" in args:  # the retry: finish the run the checkpoint belongs to
    run = pathlib.Path(args[args.index("--resume-path") + 1]).parent
    (run / "summary.json").write_text(json.dumps({"total_updates": 10, "last": {"return_mean": 1.5}}))
    sys.exit(0)
run = pathlib.Path(args[args.index("--logdir") + 1]) / "Task" / "cql" / "0" / "run"
run.mkdir(parents=True)
(run / "checkpoint.pth").write_bytes(b"")
os.kill(os.getpid(), 9)  # as the kernel's OOM killer would
"""


def test_a_sweep_trial_killed_after_a_checkpoint_is_retried_from_it(tmp_path: Path) -> None:
    from offline_rl.sweep.trial import run_trial

    (tmp_path / "flaky.py").write_text(FLAKY_TRIAL)
    folder = tmp_path / "trial"
    outcome = run_trial("flaky", "t", ["--seed", "0"], str(folder), max_retries=2, cwd=str(tmp_path))
    assert (outcome.status, outcome.attempts, outcome.resumed) == ("done", 2, True)
    assert (outcome.score, outcome.updates) == (1.5, 10)
    attempts = [line for line in (folder / "output.log").read_text().splitlines() if line.startswith("[sweep] attempt")]
    checkpoint = folder / "Task" / "cql" / "0" / "run" / "checkpoint.pth"
    assert attempts == [
        f"[sweep] attempt 1: --seed 0 --logdir {folder}",
        f"[sweep] attempt 2: --resume-path {checkpoint}",
    ]


def test_a_sweep_trial_that_keeps_crashing_fails_after_its_retries(tmp_path: Path) -> None:
    from offline_rl.sweep.trial import run_trial

    (tmp_path / "crashes.py").write_text("import sys\nsys.exit(1)\n")
    folder = tmp_path / "trial"
    outcome = run_trial("crashes", "t", [], str(folder), max_retries=2, cwd=str(tmp_path))
    assert (outcome.status, outcome.attempts, outcome.resumed) == ("failed", 3, False)
    assert outcome.message == f"exited with status 1 in each of 3 attempts; see {folder / 'output.log'}"


def test_a_conversion_sigterm_reaches_its_workers_which_stop_their_shards(tmp_path: Path) -> None:
    """Kubernetes signals a container's first process only: the converter passes SIGTERM on, so its
    workers stop now (leaving no temporary file) rather than finish their shards first."""
    import numpy as np

    from offline_rl.data.rl_unplugged.testing import random_episode, serialize, shuffled_records, write_shard

    rng = np.random.default_rng(0)
    shards = []
    for index in range(2):
        episodes = [random_episode(rng, episode, 1000, terminal=True) for episode in range(8)]
        shards.append(tmp_path / f"shard{index}")
        write_shard(shards[-1], (serialize(record) for record in shuffled_records(episodes, seed=index)))
    output = tmp_path / "out"
    command = [str(REPO_ROOT / "converters/rl_unplugged_atari.py"), "--shard-file", *map(str, shards)]
    conversion = _start([*command, "--output", str(output), "--workers", "2"], tmp_path)
    deadline = time.monotonic() + 120
    # Both workers write their temporaries (a shard finished before the other's start, as on a loaded
    # machine, would be kept and fail the check below for a reason that is not the one tested).
    while not (output.is_dir() and len(list(output.glob(".*.part"))) == 2):
        assert conversion.poll() is None and time.monotonic() < deadline
        assert not list(output.glob("*.hdf5")), "a shard finished before both workers were writing"
        time.sleep(0.005)
    conversion.send_signal(signal.SIGTERM)  # to the converter alone
    _, err = conversion.communicate(timeout=120)
    assert conversion.returncode == EXIT_TERMINATED, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM): no output was left half-written"
    assert list(output.iterdir()) == []  # neither finished shards nor temporaries


def test_a_sigterm_during_a_log_write_stops_the_run_after_the_write(tmp_path: Path) -> None:
    """TensorBoard's writer takes a lock on every write; a stop raised while it was held once left it
    taken, and the run, having printed how to resume, hung closing its log. The stop now waits for the
    write to finish, then stops the run, and the log closes."""
    from torch.utils.tensorboard import SummaryWriter

    from offline_rl.runs.event_writer import uninterrupted_writes

    writer = uninterrupted_writes(SummaryWriter(str(tmp_path)))
    file_writer = writer._get_file_writer()
    finished = []
    add_summary = file_writer.add_summary

    def signalled_mid_write(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the write is under way
        time.sleep(0.05)
        add_summary(*args, **kwargs)
        finished.append(True)

    file_writer.add_summary = signalled_mid_write
    with sigterm_stops_like_ctrl_c(), pytest.raises(Terminated):
        writer.add_scalar("loss", 1.0, 0)
    assert finished == [True]
    closing = threading.Thread(target=writer.close, daemon=True)
    closing.start()
    closing.join(30)
    assert not closing.is_alive()


@contextlib.contextmanager
def _sigterm_sent_while_handlers_are_restored() -> Iterator[None]:
    """SIGTERM sent just after SIGINT's handler is put back, while SIGTERM's is still held: the
    window after a holder's last look at what it received."""
    restore = signal.signal

    def signalled_while_restoring(signum, handler):
        previous = restore(signum, handler)
        if signum == signal.SIGINT and handler is signal.default_int_handler:  # put back, not replaced
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        return previous

    signal.signal = signalled_while_restoring
    try:
        yield
    finally:
        signal.signal = restore


def test_a_sigterm_arriving_as_a_held_call_ends_is_not_lost() -> None:
    """The stop held during a write is raised by its own handler after every handler is back, so a
    signal that arrives while they are put back still stops the run (before, one could be recorded
    after the last check and dropped: a run signalled during an evaluation's logging trained on)."""
    from offline_rl.core.interrupts import interrupts_held_during

    def write() -> None:
        pass

    with sigterm_stops_like_ctrl_c(), pytest.raises(Terminated), _sigterm_sent_while_handlers_are_restored():
        interrupts_held_during(write)()


def test_a_sigterm_after_a_collections_last_check_stops_it_as_the_block_ends() -> None:
    """The collection's deferral has the same window after its last check: the signal is raised as
    the block ends rather than dropped, and the collection's command stops."""
    with (
        sigterm_stops_like_ctrl_c(),
        pytest.raises(Terminated),
        _sigterm_sent_while_handlers_are_restored(),
        interrupts_between_steps() as stop_if_interrupted,
    ):
        stop_if_interrupted()  # the last check: nothing yet
