"""Load time and peak memory of a 1M-transition D4RL-format file, against Tianshou's own loader.

    python benchmarks/load_d4rl.py [--size 1000000] [--repeats 3]

Writes a D4RL v2-layout file (obs 17, act 6, float32, with next_observations and time-outs every
1000 steps, like halfcheetah-medium-v2) to a temporary folder, then in a fresh subprocess per
loader measures wall time and peak RSS above the post-import baseline:

- `offline_rl.load_d4rl` (validation, NaN checks, exact episode ends);
- Tianshou's `ReplayBuffer.from_data` on the same arrays (what Tianshou's own D4RL example does,
  with `done = terminals` only: it has no time-out handling);
- the same file without `next_observations` through `offline_rl.load_d4rl` (drops time-out steps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

MEASURE = r"""
import json, resource, sys, time
import h5py, numpy as np
from tianshou.data import ReplayBuffer
from offline_rl.data import load_d4rl

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024

def hwm_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024

def tianshou_from_data(path):
    with h5py.File(path, "r") as f:
        data = {k: f[k][()] for k in ("observations", "actions", "rewards", "terminals", "next_observations")}
    terminals = data["terminals"].astype(bool)
    return ReplayBuffer.from_data(
        obs=data["observations"], act=data["actions"], rew=data["rewards"], terminated=terminals,
        truncated=np.zeros_like(terminals), done=terminals, obs_next=data["next_observations"],
    )

loader, path = sys.argv[1], sys.argv[2]
baseline = rss_mb()
# reset the high-water mark so VmHWM measures this load only
open("/proc/self/clear_refs", "w").write("5")
start = time.perf_counter()
buffer = load_d4rl(path) if loader == "offline_rl" else tianshou_from_data(path)
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "peak_mb": hwm_mb() - baseline, "transitions": len(buffer)}))
"""


def write_file(path: Path, size: int, with_next: bool) -> int:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(size, 17)).astype(np.float32)
    columns = {
        "observations": obs,
        "actions": rng.uniform(-1, 1, size=(size, 6)).astype(np.float32),
        "rewards": rng.normal(size=size).astype(np.float32),
        "terminals": np.zeros(size, dtype=bool),
        "timeouts": (np.arange(size) % 1000) == 999,
    }
    if with_next:
        next_obs = np.empty_like(obs)
        next_obs[:-1] = obs[1:]
        next_obs[-1] = obs[-1]
        columns["next_observations"] = next_obs
    with h5py.File(path, "w") as file:
        for key, value in columns.items():
            file[key] = value
    return sum(value.nbytes for value in columns.values())


def measure(loader: str, path: Path, repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", MEASURE, loader, str(path)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "seconds": float(np.median([r["seconds"] for r in runs])),
        "peak_mb": float(np.median([r["peak_mb"] for r in runs])),
        "transitions": runs[0]["transitions"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full, bare = Path(tmp) / "full.hdf5", Path(tmp) / "no_next.hdf5"
        raw_full = write_file(full, args.size, with_next=True) / 2**20
        raw_bare = write_file(bare, args.size, with_next=False) / 2**20
        rows = [
            ("offline_rl.load_d4rl", measure("offline_rl", full, args.repeats), raw_full),
            ("tianshou ReplayBuffer.from_data", measure("tianshou", full, args.repeats), raw_full),
            ("offline_rl.load_d4rl, no next_observations", measure("offline_rl", bare, args.repeats), raw_bare),
        ]
    print(f"{'loader':46s} {'transitions':>11s} {'seconds':>8s} {'peak MB':>8s} {'raw MB':>7s} {'peak/raw':>8s}")
    for name, result, raw in rows:
        print(
            f"{name:46s} {result['transitions']:11d} {result['seconds']:8.3f} {result['peak_mb']:8.1f} "
            f"{raw:7.1f} {result['peak_mb'] / raw:8.2f}"
        )


if __name__ == "__main__":
    main()
