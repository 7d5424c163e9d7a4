"""Bad input as a user (or an attacker) meets it: every case a command given something wrong, and how
the command answered. The standard: one line naming the file, key or flag and what was expected, exit
status 2, no traceback, and nothing left behind; a planted payload never runs.

    python benchmarks/bad_input_probe.py [--only WORD]

Each case runs the real command in a fresh interpreter, in a scratch folder holding a small dataset,
a finished tiny run and the damaged or foreign files the cases name. Prints one row per case and the
count of each outcome. Not part of CI (it takes a few minutes).
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = "--task Pendulum-v1 --dataset-size 1500 --step-per-epoch 15 --test-num 1 --hidden-sizes 16 --critic-layers 1"
PAYLOAD = "payload-ran"  # a planted payload writes this file


def command(*words: str) -> list[str]:
    return [sys.executable, *words]


def d4rl(arguments: str) -> list[str]:
    return command(str(ROOT / "examples/d4rl_cql.py"), *arguments.split())


def prepare(folder: Path) -> dict[str, str]:
    """The files the cases name: a dataset, a finished run, and damaged or foreign copies."""
    import torch

    import offline_rl  # noqa: F401  (first: TensorBoard then writes without importing TensorFlow)

    subprocess.run(d4rl(f"{TINY} --epoch 1 --logdir run"), cwd=folder, check=True, capture_output=True)
    (checkpoint,) = (folder / "run").rglob("checkpoint.pth")
    (dataset,) = (folder / "cache").rglob("*.hdf5")
    files = {"checkpoint": str(checkpoint), "policy": str(checkpoint.parent / "policy.pth"), "dataset": str(dataset)}
    damaged = bytearray(checkpoint.read_bytes())
    weights = torch.load(checkpoint, weights_only=True)["algorithm"]
    tensor = next(value for value in weights.values() if isinstance(value, torch.Tensor) and value.numel() >= 16)
    start = damaged.index(tensor.numpy().tobytes()[:32])
    for offset in range(5):
        damaged[start + 8 * offset] ^= 0xFF
    (folder / "damaged.pth").write_bytes(bytes(damaged))
    (folder / "random.pth").write_bytes(os.urandom(4096))
    torch.save({"layer": torch.nn.Linear(2, 2)}, folder / "objects.pth")
    (folder / "text.hdf5").write_text("not a dataset\n")
    (folder / "empty.hdf5").write_bytes(b"")
    (folder / "truncated.hdf5").write_bytes(dataset.read_bytes()[:5000])
    plant_payload(folder / "evil.hdf5", folder / PAYLOAD)
    presets = {
        "float-epoch.yaml": "epoch: 1.5\n",
        "bool-seed.yaml": "seed: true\n",
        "twice.yaml": "epoch: 3\nepoch: 4\n",
        "list.yaml": "- a\n- b\n",
        "unknown.yaml": "no_such_setting: 1\n",
    }
    for name, text in presets.items():
        (folder / name).write_text(text)
    sweeps = {
        "outside.yaml": "example: d4rl_cql\nname: ../../x\ngrid: {seed: [0]}\n",
        "float-grid.yaml": "example: d4rl_cql\ngrid: {epoch: [1.5, 2]}\n",
        "no-example.yaml": "grid: {seed: [0, 1]}\n",
    }
    for name, text in sweeps.items():
        (folder / name).write_text(text)
    return files


class _Payload:
    """A pickled object whose loading runs a shell command: what a planted buffer file carries."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


def plant_payload(path: Path, marker: Path) -> None:
    """A Tianshou HDF5 buffer whose pickled `_random_state` would create `marker` when unpickled."""
    import h5py
    import numpy as np
    from tianshou.data import Batch, ReplayBuffer

    from offline_rl.data import save_buffer

    buffer = ReplayBuffer(8)
    for step in range(8):
        obs = np.full(3, step, dtype=np.float32)
        buffer.add(Batch(obs=obs, act=np.zeros(1, np.float32), rew=0.0, obs_next=obs, terminated=False,
                         truncated=step == 7, info={}))  # fmt: skip
    save_buffer(buffer, path)
    with h5py.File(path, "a") as file:
        if "_random_state" in file:
            del file["_random_state"]
        file.create_dataset("_random_state", data=np.frombuffer(pickle.dumps(_Payload(f"touch {marker}")), np.byte))
        file["_random_state"].attrs["__data_type__"] = "str"


def cases(files: dict[str, str]) -> list[tuple[str, list[str]]]:
    odd = os.fsdecode(b"log\xff")
    flags = [
        "--epoch 1e23", "--epoch 2.5", "--epoch 0", "--epoch 2000000", "--batch-size 0", "--batch-size 1e9",
        "--batch-size 20000000", "--threads 100000", "--threads -1", "--hidden-sizes 100000 100000",
        "--hidden-sizes 0", "--test-num 100000", "--test-num 0", "--cql-weight nan", "--tau 0", "--gamma 2",
        "--seed -1", "--device cuda:7", "--task Nonexistent-v0", "--logdir /proc/offline_rl",
        "--dataset missing.hdf5", "--dataset text.hdf5", "--dataset empty.hdf5", "--dataset truncated.hdf5",
        "--dataset evil.hdf5", "--config missing.yaml", "--config float-epoch.yaml", "--config bool-seed.yaml",
        "--config twice.yaml", "--config list.yaml", "--config unknown.yaml",
    ]  # fmt: skip
    found = [(f"d4rl_cql.py {flag}", d4rl(f"{TINY} --epoch 1 {flag}")) for flag in flags]
    found.append(("d4rl_cql.py --logdir <non-UTF-8 byte>", [*d4rl(f"{TINY} --epoch 1"), "--logdir", odd]))
    for name in ("missing.pth", "damaged.pth", "random.pth", "objects.pth", files["policy"], "."):
        found.append((f"d4rl_cql.py --resume-path {Path(name).name}", d4rl(f"--resume-path {name}")))
    found.append(("d4rl_cql.py --watch --resume-path damaged.pth", d4rl("--watch --resume-path damaged.pth")))
    online = str(ROOT / "examples/atari_qrdqn.py")
    for flag in ("--training-num 100000", "--hidden-sizes 100000 100000", "--batch-size 100000000"):
        found.append((f"atari_qrdqn.py {flag}", command(online, "--task", "CartPole-v1", *flag.split())))
    atari = str(ROOT / "examples/atari_cql.py")
    found += [
        ("atari_cql.py --load-buffer-name missing.hdf5", command(atari, "--load-buffer-name", "missing.hdf5")),
        ("atari_cql.py --load-buffer-name evil.hdf5", command(atari, "--task", "CartPole-v1", "--load-buffer-name",
                                                              "evil.hdf5")),
        ("describe evil.hdf5", command("-m", "offline_rl.describe", "evil.hdf5")),
        ("describe text.hdf5", command("-m", "offline_rl.describe", "text.hdf5")),
    ]  # fmt: skip
    for sweep in ("outside.yaml", "float-grid.yaml", "no-example.yaml"):
        found.append((f"sweep {sweep}", command("-m", "offline_rl.sweep", sweep)))
    found.append(("sweep --name ..", command("-m", "offline_rl.sweep", "--example", "d4rl_cql", "--name", "..")))
    return found


def judge(done: subprocess.CompletedProcess[str], folder: Path) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if (folder / PAYLOAD).exists():
        return "PAYLOAD RAN"
    if "Traceback" in done.stderr:
        return "traceback"
    if done.returncode == 0:
        return "accepted"
    if (done.returncode == 2 and lines and lines[-1].startswith(("error:", "usage:"))) or "error:" in done.stderr:
        return "one line" if len(lines) <= 2 else "refused, several lines"
    return f"exit {done.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose name holds this")
    only = parser.parse_args().only
    with tempfile.TemporaryDirectory(prefix="bad-input-") as scratch:
        folder = Path(scratch)
        os.environ["OFFLINE_RL_CACHE_DIR"] = str(folder / "cache")
        files = prepare(folder)
        outcomes: dict[str, int] = {}
        print("| case | outcome | seconds | last line |\n|---|---|---|---|")
        for name, argv in cases(files):
            if only not in name:
                continue
            start = time.perf_counter()
            done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
            outcome = judge(done, folder)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1][:110]
            print(f"| {name} | {outcome} | {time.perf_counter() - start:.1f} | {last.replace('|', '/')} |", flush=True)
        print("\n" + ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items())))


if __name__ == "__main__":
    main()
