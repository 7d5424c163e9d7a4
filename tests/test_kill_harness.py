"""Runs killed at chosen points and resumed until done end exactly as the run never stopped.

Each stop is made inside a real process: a prelude patches the program at the chosen point (after
the checkpoint's rename, inside an evaluation, inside the checkpoint's write, at a random update)
and ends it there with SIGKILL, which lets nothing clean up, or with Ctrl-C, which stops between
two updates. Every resume runs the command a user would. The final weights, optimiser states and
generators, every evaluation printed, the best and its policy file, and the update count must equal
those of the run that was never stopped.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import torch
from test_d4rl_cql_example import TINY
from test_exact_resume import assert_same_checkpoints, checkpoint_state, run_folder, run_ok

from conftest import REPO_ROOT

STOPPING_RUNS = r"""
import json, os, pathlib, runpy, signal, sys

import offline_rl.cli.atari_cql  # what every run imports, once: each run below is a fork of this process
import offline_rl.cli.d4rl_cql
import offline_rl.runs.training
import torch.utils.tensorboard

script, logdir, out = sys.argv[1], sys.argv[4], sys.argv[5]
stops, first_arguments = json.loads(sys.argv[2]), json.loads(sys.argv[3])


def stop_at(point: str, when: int, stop: int) -> None:
    calls = [0]

    def due() -> bool:
        calls[0] += 1
        return calls[0] == when

    if point == "after-checkpoint-rename":  # checkpoint.pth in place, nothing after it done
        replace = os.replace

        def replaced(source, destination, *args, **kwargs):
            replace(source, destination, *args, **kwargs)
            if os.path.basename(destination) == "checkpoint.pth" and due():
                os.kill(os.getpid(), stop)

        os.replace = replaced
    elif point == "inside-evaluation":  # the n-th evaluation of this run, 20 steps into its episodes
        from offline_rl.runs.evaluation_collector import EvaluationCollector

        collect = EvaluationCollector.collect

        def collecting(self, *args, **kwargs):
            if due():
                step, steps = self.env.step, [0]

                def stepping(*args, **kwargs):
                    steps[0] += 1
                    if steps[0] == 20:
                        os.kill(os.getpid(), stop)
                    return step(*args, **kwargs)

                self.env.step = stepping
            return collect(self, *args, **kwargs)

        EvaluationCollector.collect = collecting
    elif point == "inside-checkpoint-write":  # written to its temporary file, not yet renamed
        import torch

        save = torch.save

        def saving(payload, file, *args, **kwargs):
            save(payload, file, *args, **kwargs)
            if os.path.basename(str(file)).startswith((".checkpoint.pth.", "..checkpoint-next.pth.")) and due():
                os.kill(os.getpid(), stop)

        torch.save = saving
    elif point == "update":  # during the n-th update of this run
        from offline_rl.algorithms.base import CountedOfflineAlgorithm

        update = CountedOfflineAlgorithm.update

        def updating(self, *args, **kwargs):
            if due():
                os.kill(os.getpid(), stop)
            return update(self, *args, **kwargs)

        CountedOfflineAlgorithm.update = updating


statuses = []
for number, at in enumerate(stops):
    arguments = first_arguments
    if number:  # what a user types to go on
        checkpoint = sorted(pathlib.Path(logdir).rglob("checkpoint.pth"))[0]  # a batch of seeds: the first seed's
        arguments = ["--resume-path", str(checkpoint), "--threads", "1", "--device", "cpu"]
    pid = os.fork()
    if pid == 0:
        for descriptor, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(f"{out}/{number}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC), descriptor)
        point, when, stop = at.split(":")  # e.g. "inside-evaluation:2:SIGKILL", "none:0:-"
        if point != "none":
            stop_at(point, int(when), getattr(signal, stop))
        sys.argv = [script, *arguments]
        code = 1
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(statuses))
"""


def run_stopped(
    stops: list[str], first_arguments: list[str], logdir: Path, out: Path, script: str = "examples/d4rl_cql.py"
) -> list[int]:
    """Run `script` once per stop, each from the checkpoint the one before left (the first with
    `first_arguments`), each stopped at its point ("POINT:N:SIGNAL": after the checkpoint's N-th rename,
    inside the N-th evaluation, inside the N-th checkpoint write, or during the N-th update; "none:0:-"
    runs to the end); their exit statuses. Each run's output is in `out`/<n>.out and <n>.err."""
    out.mkdir()
    arguments = [script, json.dumps(stops), json.dumps(first_arguments), str(logdir), str(out)]
    done = subprocess.run(
        [sys.executable, "-c", STOPPING_RUNS, *arguments],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


EPOCHS, UPDATES = 5, 15  # TINY's --step-per-epoch


def evaluations(stdout: str) -> list[tuple[int, str]]:
    found = re.findall(r"^evaluation (\d+)(?: of the resumed weights)? \(\d+ episodes?\): (.+)$", stdout, re.MULTILINE)
    return [(int(index), text) for index, text in found]


def ends_as_the_straight_run(straight: Path, straight_out: str, stopped: Path, printed: list[tuple[int, str]]) -> None:
    """The checks of a stopped and resumed run against the one never stopped (each an assertion):
    every evaluation made, each as the straight run printed it; equal final weights, optimiser states
    and generators; equal policy files and summaries; nothing half-written left."""
    expected = dict(evaluations(straight_out))
    assert {index for index, _ in printed} == set(expected)  # every evaluation made, none lost
    assert all(text == expected[index] for index, text in printed), printed  # and each as the straight run's
    assert_same_checkpoints(straight / "checkpoint.pth", stopped / "checkpoint.pth", exact=True)
    for weights in ("policy_last.pth", "policy.pth"):
        a, b = (checkpoint_state(folder / weights, ("algorithm",)) for folder in (straight, stopped))
        assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a), weights
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (straight, stopped)]
    for key in ("last", "best_optimistic", "best_epoch", "total_updates"):
        assert summaries[0][key] == summaries[1][key], key
    assert summaries[1]["best_epoch"] is not None
    assert not [path.name for path in stopped.iterdir() if path.name.endswith(".part")]  # what the kills left went


def test_a_run_killed_anywhere_and_resumed_ends_as_the_run_never_stopped(tmp_path: Path) -> None:
    machine = ["--threads", "1", "--device", "cpu", "--epoch", str(EPOCHS)]
    straight_out = run_ok("examples/d4rl_cql.py", *TINY, *machine, "--logdir", str(tmp_path / "straight"), cwd=tmp_path)
    assert sorted(dict(evaluations(straight_out))) == list(range(1, EPOCHS + 1))

    draw = random.Random(77)
    ctrl_c = UPDATES + draw.randrange(1, UPDATES - 1)  # the process's updates: epoch 3's, then into epoch 4
    sigterm = draw.randrange(1, 2 * UPDATES - ctrl_c)  # further into epoch 4
    kill = (2 * UPDATES - ctrl_c - sigterm) + draw.randrange(1, UPDATES)  # the rest of epoch 4, then into epoch 5
    stops = [  # (where, its status): each resume meets the next stop
        ("after-checkpoint-rename:1:SIGKILL", -signal.SIGKILL),  # epoch 1 saved, its evaluation not made
        ("inside-evaluation:2:SIGKILL", -signal.SIGKILL),  # evaluation 1 again, then inside evaluation 2
        ("inside-checkpoint-write:1:SIGKILL", -signal.SIGKILL),  # epoch 3's checkpoint half done: epoch 2's stays
        (f"update:{ctrl_c}:SIGINT", 130),  # inside epoch 4: a checkpoint between two updates
        (f"update:{sigterm}:SIGTERM", 143),  # a scheduler's stop, later in epoch 4: the same
        (f"update:{kill}:SIGKILL", -signal.SIGKILL),  # the rest of epoch 4, then inside epoch 5
        ("none:0:-", 0),
    ]
    logdir, out, printed = tmp_path / "stopped", tmp_path / "out", []
    statuses = run_stopped([at for at, _ in stops], [*TINY, *machine, "--logdir", str(logdir)], logdir, out)
    for number, ((at, status), ended) in enumerate(zip(stops, statuses, strict=True)):
        stdout, stderr = (out / f"{number}.out").read_text(), (out / f"{number}.err").read_text()
        assert ended == status, (at, stdout[-1500:], stderr[-1500:])
        assert "Traceback" not in stderr, (at, stderr[-1500:])
        printed += evaluations(stdout)
        if status in (130, 143):  # said how far it got and how to go on, and left nothing half-written
            updates = ctrl_c if status == 130 else sigterm
            found = re.search(rf"^interrupted after {updates} updates; continue with --resume-path (.+)$", stdout, re.M)
            assert found and Path(found.group(1)).is_file(), stdout[-1500:]
            stopped_by = "interrupted" if status == 130 else "terminated (SIGTERM)"
            assert stderr.strip().splitlines()[-1] == f"{stopped_by}: no output was left half-written"
            assert [path.name for path in run_folder(logdir).iterdir() if path.name.startswith(".")] == [".lock"]

    ends_as_the_straight_run(run_folder(tmp_path / "straight"), straight_out, run_folder(logdir), printed)
    summary = json.loads((run_folder(logdir) / "summary.json").read_text())
    assert summary["total_updates"] == EPOCHS * UPDATES
