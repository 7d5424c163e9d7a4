"""How long a user waits before anything happens: `import offline_rl`, `--help` of each entry point,
and a whole tiny training run (15 updates), where Tianshou's numba functions compile unless cached.

    python benchmarks/startup_time.py [--repeat 5]

Each figure is the best of `--repeat` fresh interpreter runs (so the operating system's file cache
is warm, as on a second try). The tiny run is also timed once with numba's cache of Tianshou's
functions emptied first (a first run after installing). Not part of CI.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c 'import offline_rl'": [sys.executable, "-c", "import offline_rl"],
    "python -c 'import offline_rl; offline_rl.CQLSAC' (torch + Tianshou)": [
        sys.executable, "-c", "import offline_rl; offline_rl.CQLSAC",
    ],
    **{
        f"python {script} --help": [sys.executable, str(ROOT / script), "--help"]
        for script in (
            "examples/d4rl_cql.py", "examples/atari_cql.py", "examples/atari_qrdqn.py",
            "converters/d4rl.py", "converters/minari.py", "converters/rl_unplugged_atari.py",
        )
    },
    **{
        f"python -m {module} --help": [sys.executable, "-m", module, "--help"]
        for module in ("offline_rl.collect", "offline_rl.sweep", "offline_rl.results")
    },
    "python examples/d4rl_cql.py --epoch none (a flag error)": [
        sys.executable, str(ROOT / "examples/d4rl_cql.py"), "--epoch", "none",
    ],
    "python converters/rl_unplugged_atari.py --task Pongg (an unknown game)": [
        sys.executable, str(ROOT / "converters/rl_unplugged_atari.py"), "--task", "Pongg",
    ],
}  # fmt: skip


TINY_RUN = [
    sys.executable, str(ROOT / "examples/d4rl_cql.py"), "--task", "Pendulum-v1", "--dataset-size", "1500",
    "--step-per-epoch", "15", "--epoch", "1", "--test-num", "1", "--hidden-sizes", "16", "--critic-layers", "1",
]  # fmt: skip


def best_time(command: list[str], repeat: int, cwd: Path = ROOT) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False, cwd=cwd)
        times.append(time.perf_counter() - start)
    return min(times)


def empty_tianshou_jit_cache() -> None:
    """Remove numba's cached compilations of Tianshou's functions (next to its sources). Found without
    importing Tianshou, whose TensorBoard import would load TensorFlow where it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("tianshou")
    assert spec is not None and spec.origin is not None, "Tianshou is not installed"
    package = Path(spec.origin).parent
    for cached in [*package.rglob("*.nbi"), *package.rglob("*.nbc")]:
        cached.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"| command | seconds (best of {args.repeat}) |")
    print("|---|---|")
    for label, command in COMMANDS.items():
        print(f"| `{label}` | {best_time(command, args.repeat):.2f} |", flush=True)
    work = Path(tempfile.mkdtemp())
    try:
        best_time(TINY_RUN, 1, work)  # generates the tiny dataset once
        empty_tianshou_jit_cache()
        print(f"| a 15-update run, numba cache empty | {best_time(TINY_RUN, 1, work):.2f} |", flush=True)
        print(f"| a 15-update run | {best_time(TINY_RUN, args.repeat, work):.2f} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
