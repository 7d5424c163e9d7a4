"""Kill and resume as a crash, a scheduler and an impatient user stop a run: each kind of stop made
several times at drawn points, each run resumed with the command the program printed (or the one a
user would type after SIGKILL) until done, and the end compared with the run never stopped: every
evaluation printed as it printed them, the final weights, optimiser states and generators bit for bit,
the best and its policy file, the summary, and nothing half-written left.

    python benchmarks/kill_resume_probe.py [--cycles 3] [--only WORD]

The stops are made by the test suite's kill harness (`tests/test_kill_harness.py`), here at full size:
one row per kind with how many of its cycles ended as the straight run. Not part of CI (it takes a
few minutes).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_d4rl_cql_example import TINY  # noqa: E402
from test_exact_resume import run_folder, run_ok  # noqa: E402
from test_kill_harness import ends_as_the_straight_run, evaluations, run_stopped  # noqa: E402

EPOCHS, UPDATES = 4, 15  # TINY's --step-per-epoch
MACHINE = ["--threads", "1", "--device", "cpu"]
CONTINUOUS = "examples/d4rl_cql.py"
DISCRETE = "examples/atari_cql.py"
DISCRETE_FLAGS = ["--task", "CartPole-v1", "--update-per-epoch", "20", "--test-num", "2", "--num-quantiles", "8"]


def update_in(draw: random.Random, epochs: range, updates: int = UPDATES) -> int:
    """An update drawn from the given epochs (1-based), counted from the run's first."""
    return draw.randrange((epochs.start - 1) * updates + 1, (epochs.stop - 1) * updates + 1)


# Each kind: its name, its program, and its stops drawn for one cycle ("POINT:N:SIGNAL", then the run to the end).
KINDS: list[tuple[str, str, Callable[[random.Random], list[str]]]] = [
    ("SIGKILL after the checkpoint's rename", CONTINUOUS,
     lambda d: [f"after-checkpoint-rename:{d.randint(1, EPOCHS - 1)}:SIGKILL"]),
    ("SIGKILL inside an evaluation", CONTINUOUS, lambda d: [f"inside-evaluation:{d.randint(2, EPOCHS)}:SIGKILL"]),
    ("SIGKILL inside the checkpoint's write", CONTINUOUS,
     lambda d: [f"inside-checkpoint-write:{d.randint(1, EPOCHS - 1)}:SIGKILL"]),
    ("SIGKILL at an update", CONTINUOUS, lambda d: [f"update:{update_in(d, range(2, EPOCHS + 1))}:SIGKILL"]),
    ("Ctrl-C at an update", CONTINUOUS, lambda d: [f"update:{update_in(d, range(2, EPOCHS + 1))}:SIGINT"]),
    ("SIGTERM at an update", CONTINUOUS, lambda d: [f"update:{update_in(d, range(1, EPOCHS + 1))}:SIGTERM"]),
    ("Ctrl-C before the first epoch ends", CONTINUOUS, lambda d: [f"update:{update_in(d, range(1, 2))}:SIGINT"]),
    ("Ctrl-C inside an evaluation", CONTINUOUS, lambda d: [f"inside-evaluation:{d.randint(2, EPOCHS)}:SIGINT"]),
    ("SIGTERM inside an evaluation", CONTINUOUS, lambda d: [f"inside-evaluation:{d.randint(2, EPOCHS)}:SIGTERM"]),
    ("Ctrl-C inside the checkpoint's write", CONTINUOUS,
     lambda d: [f"inside-checkpoint-write:{d.randint(1, EPOCHS - 1)}:SIGINT"]),
    ("Ctrl-C, then SIGKILL of the resumed run", CONTINUOUS,
     lambda d: [f"update:{update_in(d, range(2, 3))}:SIGINT", f"update:{d.randint(1, UPDATES)}:SIGKILL"]),
    ("discrete CQL: SIGTERM at an update", DISCRETE,
     lambda d: [f"update:{update_in(d, range(2, EPOCHS + 1), 20)}:SIGTERM"]),
]  # fmt: skip
COPIED = "checkpoint copied elsewhere, resumed with more epochs"


def flags_of(script: str, scratch: Path) -> list[str]:
    if script == CONTINUOUS:
        return [*TINY, *MACHINE]
    return [*DISCRETE_FLAGS, "--load-buffer-name", str(scratch / "cartpole.hdf5"), *MACHINE]


def straight_run(script: str, scratch: Path) -> tuple[Path, str]:
    logdir = scratch / f"straight-{Path(script).stem}"
    out = run_ok(script, *flags_of(script, scratch), "--epoch", str(EPOCHS), "--logdir", str(logdir), cwd=scratch)
    return run_folder(logdir), out


def cycle(script: str, stops: list[str], folder: Path, straight: tuple[Path, str]) -> str:
    """'' when the stopped run ended as the straight one, else what differed."""
    flags = flags_of(script, folder.parent)
    logdir, out = folder / "stopped", folder / "out"
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    first = [*flags, "--epoch", str(EPOCHS), "--logdir", str(logdir)]
    statuses = run_stopped([*stops, "none:0:-"], first, logdir, out, script=script)
    return compare(statuses, out, straight, run_folder(logdir))


def copied_cycle(draw: random.Random, folder: Path, straight: tuple[Path, str]) -> str:
    """A finished shorter run's checkpoint copied to another folder and resumed there with --epoch."""
    shorter = draw.randint(1, EPOCHS - 1)
    for name in ("short", "out", "copy", "out-copy"):
        shutil.rmtree(folder / name, ignore_errors=True)
    flags = [*TINY, *MACHINE, "--epoch", str(shorter), "--logdir", str(folder / "short")]
    first = run_stopped(["none:0:-"], flags, folder / "short", folder / "out")
    copy = folder / "copy/run/checkpoint.pth"
    copy.parent.mkdir(parents=True)
    shutil.copy(run_folder(folder / "short") / "checkpoint.pth", copy)
    resume = ["--resume-path", str(copy), "--epoch", str(EPOCHS), *MACHINE]
    second = run_stopped(["none:0:-"], resume, folder / "copy", folder / "out-copy")
    printed = evaluations((folder / "out/0.out").read_text())
    for number in range(len(second)):
        printed += evaluations((folder / f"out-copy/{number}.out").read_text())
    if first + second != [0, 0]:
        return f"exit statuses {first + second}"
    return checked(lambda: ends_as_the_straight_run(*straight, copy.parent, printed))


def compare(statuses: list[int], out: Path, straight: tuple[Path, str], stopped: Path) -> str:
    printed = []
    for number in range(len(statuses)):
        stderr = (out / f"{number}.err").read_text()
        if "Traceback" in stderr:
            return f"run {number} ended in a traceback: {stderr.strip().splitlines()[-1]}"
        printed += evaluations((out / f"{number}.out").read_text())
    if statuses[-1] != 0:
        return f"the last run ended with {statuses[-1]}"
    return checked(lambda: ends_as_the_straight_run(*straight, stopped, printed))


def checked(check: Callable[[], None]) -> str:
    try:
        check()
    except AssertionError as failed:
        return f"differs: {str(failed).splitlines()[0][:120] if str(failed) else traceback.format_exc(limit=1)}"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3, help="stops of each kind, each at its own drawn point")
    parser.add_argument("--only", default="", help="run only the kinds whose name holds this")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kill-resume-") as scratch:
        folder = Path(scratch)
        os.environ["OFFLINE_RL_CACHE_DIR"] = str(folder / "cache")  # the generated dataset, made once
        collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
        run_ok("examples/atari_qrdqn.py", *collect, "--save-buffer-name", "cartpole.hdf5", cwd=folder)
        straight = {script: straight_run(script, folder) for script in (CONTINUOUS, DISCRETE)}
        print("| kind of stop | cycles ending as the straight run | what differed |\n|---|---|---|")
        total = matched = 0
        for name, script, stops_of in [*KINDS, (COPIED, CONTINUOUS, lambda d: [])]:
            if options.only not in name:
                continue
            differences = []
            for number in range(options.cycles):
                draw, work = random.Random(f"{name}/{number}"), folder / f"cycle-{len(name)}-{number}"
                work.mkdir()
                found = (
                    copied_cycle(draw, work, straight[script])
                    if name == COPIED
                    else cycle(script, stops_of(draw), work, straight[script])
                )
                if found:
                    differences.append(found)
                shutil.rmtree(work)
            total += options.cycles
            matched += options.cycles - len(differences)
            print(f"| {name} | {options.cycles - len(differences)} of {options.cycles} | {'; '.join(differences)} |",
                  flush=True)  # fmt: skip
        print(f"\n{matched} of {total} cycles ended as the run never stopped")


if __name__ == "__main__":
    main()
