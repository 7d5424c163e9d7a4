"""How long a user waits before anything happens: `import offline_rl`, and `--help` of each entry point.

    python benchmarks/startup_time.py [--repeat 5]

Each figure is the best of `--repeat` fresh interpreter runs (so the operating system's file cache
is warm, as on a second try). Not part of CI.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
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
        for script in ("examples/d4rl_cql.py", "examples/atari_cql.py", "examples/atari_qrdqn.py")
    },
    "python examples/d4rl_cql.py --epoch none (a flag error)": [
        sys.executable, str(ROOT / "examples/d4rl_cql.py"), "--epoch", "none",
    ],
}  # fmt: skip


def best_time(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=False, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"| command | seconds (best of {args.repeat}) |")
    print("|---|---|")
    for label, command in COMMANDS.items():
        print(f"| `{label}` | {best_time(command, args.repeat):.2f} |", flush=True)


if __name__ == "__main__":
    main()
