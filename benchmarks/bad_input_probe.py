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


PRESETS = {
    "float-epoch.yaml": "epoch: 1.5\n",
    "bool-seed.yaml": "seed: true\n",
    "twice.yaml": "epoch: 3\nepoch: 4\n",
    "list.yaml": "- a\n- b\n",
    "unknown.yaml": "no_such_setting: 1\n",
    "syntax.yaml": "epoch: [1\n",
    "negative.yaml": "batch_size: -1\n",
    "text-sizes.yaml": "hidden_sizes: abc\n",
    "bool-epoch.yaml": "epoch: true\n",
    "python-tag.yaml": "epoch: !!python/object/apply:os.system ['touch payload-ran']\n",
}  # wrong preset files, by name
SWEEPS = {
    "outside.yaml": "example: d4rl_cql\nname: ../../x\ngrid: {seed: [0]}\n",
    "float-grid.yaml": "example: d4rl_cql\ngrid: {epoch: [1.5, 2]}\n",
    "no-example.yaml": "grid: {seed: [0, 1]}\n",
    "dot.yaml": "example: d4rl_cql\nname: .\ngrid: {seed: [0]}\n",
    "absolute.yaml": "example: d4rl_cql\nname: /tmp/offline-rl-probe\ngrid: {seed: [0]}\n",
    "twice-sweep.yaml": "example: d4rl_cql\nexample: d4rl_cql\ngrid: {seed: [0]}\n",
    "same-values.yaml": "example: d4rl_cql\ngrid: {seed: [1, 1]}\n",
    "unknown-axis.yaml": "example: d4rl_cql\ngrid: {no_such_setting: [1, 2]}\n",
    "bool-grid.yaml": "example: d4rl_cql\ngrid: {seed: [true, 2]}\n",
    "unknown-example.yaml": "example: nothing\ngrid: {seed: [0]}\n",
}  # wrong sweep files, by name


def command(*words: str) -> list[str]:
    return [sys.executable, *words]


def d4rl(arguments: str) -> list[str]:
    return command(str(ROOT / "examples/d4rl_cql.py"), *arguments.split())


def prepare(folder: Path) -> dict[str, str]:
    """The files the cases name: a dataset, a finished run, and damaged or foreign copies."""
    import torch

    import offline_rl  # noqa: F401  (first: TensorBoard then writes without importing TensorFlow)

    subprocess.run(d4rl(f"{TINY} --epoch 1 --logdir run"), cwd=folder, check=True, capture_output=True)
    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "400"]
    online = command(str(ROOT / "examples/atari_qrdqn.py"), *collect, "--save-buffer-name", "cartpole.hdf5")
    subprocess.run(online, cwd=folder, check=True, capture_output=True)
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
    prepare_datasets(folder, dataset)
    (folder / "a-folder").mkdir()
    (folder / "a-file").write_text("")
    for name, text in {**PRESETS, **SWEEPS}.items():
        (folder / name).write_text(text)
    return files


def prepare_datasets(folder: Path, dataset: Path) -> None:
    """D4RL files with a column missing, columns of unequal lengths, NaN observations, and Minari
    folders whose recorded env spec names code to run."""
    import json

    import gymnasium as gym
    import h5py
    import numpy as np

    sys.path[:0] = [str(ROOT / "tests")]
    from conftest import record_minari_dataset

    def edited(name: str, change) -> None:  # a copy of the dataset with one change
        (folder / name).write_bytes(dataset.read_bytes())
        with h5py.File(folder / name, "a") as file:
            change(file)

    edited("no-actions.hdf5", lambda file: file.__delitem__("actions"))

    def shorter(file) -> None:
        rewards = file["rewards"][:-7]
        del file["rewards"]
        file["rewards"] = rewards

    def with_nan(file) -> None:
        observations = file["observations"][:]
        observations[3] = np.nan
        file["observations"][...] = observations

    def wider(file) -> None:
        observations = np.concatenate([file["observations"][:]] * 2, axis=1)
        del file["observations"]
        file["observations"] = observations

    edited("unequal.hdf5", shorter)
    edited("nan.hdf5", with_nan)
    edited("wider.hdf5", wider)
    os.environ["MINARI_DATASETS_PATH"] = str(folder / "minari")
    marker = str(folder / PAYLOAD)
    planted = {
        "evil/pendulum/call-v0": {"entry_point": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}},
        "evil/pendulum/register-v0": {
            "entry_point": "gymnasium.envs.registration:register",
            "kwargs": {"id": "Evil-v0", "entry_point": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}},
        },
        "evil/pendulum/wrapper-v0": {
            "additional_wrappers": [
                {"name": "Evil", "entry_point": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}}
            ]
        },
        "evil/cartpole/call-v0": {"entry_point": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}},
    }
    for dataset_id, spec in planted.items():
        task = "CartPole-v1" if "cartpole" in dataset_id else "Pendulum-v1"
        record_minari_dataset(dataset_id, gym.make(task), 30, gym.spec(task))
        metadata_file = folder / "minari" / dataset_id / "data/metadata.json"
        metadata = json.loads(metadata_file.read_text())
        metadata["eval_env_spec"] = json.dumps({**json.loads(metadata["eval_env_spec"]), **spec})
        metadata_file.write_text(json.dumps(metadata))


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
        "--epoch 1e23", "--epoch 2.5", "--epoch 0", "--epoch -3", "--epoch true", "--epoch 2000000",
        "--step-per-epoch 0", "--step-per-epoch 10000000000", "--batch-size 0", "--batch-size -5", "--batch-size 1e9",
        "--batch-size 20000000", "--threads 100000", "--threads -1", "--threads 1.5",
        "--hidden-sizes 100000 100000", "--hidden-sizes 0", "--hidden-sizes -4", "--hidden-sizes", "--critic-layers 0",
        "--num-critics 0", "--cql-n-actions 0", "--cql-n-actions 100000000", "--test-num 100000", "--test-num 0",
        "--test-num -1", "--dataset-size 0", "--dataset-size 1000000000000", "--cql-weight nan", "--actor-lr -1",
        "--actor-lr inf", "--critic-lr nan", "--tau 0", "--tau 2", "--gamma 2", "--gamma -0.1", "--gamma nan",
        "--seed -1", "--seed 99999999999999999999999", "--seed abc", "--device cuda:7", "--device tpu",
        "--task Nonexistent-v0", "--task CartPole-v1", "--logdir /proc/offline_rl", "--logdir a-file",
        "--export-policy policy.txt", "--no-such-flag 1", "--dataset missing.hdf5", "--dataset text.hdf5",
        "--dataset empty.hdf5", "--dataset truncated.hdf5", "--dataset a-folder", "--dataset no-actions.hdf5",
        "--dataset unequal.hdf5", "--dataset nan.hdf5", "--dataset wider.hdf5", "--dataset evil.hdf5",
        "--config missing.yaml", "--config a-folder", *(f"--config {name}" for name in PRESETS),
    ]  # fmt: skip
    found = [(f"d4rl_cql.py {flag}", d4rl(f"{TINY} --epoch 1 {flag}")) for flag in flags]
    for planted in ("call", "register", "wrapper"):  # without --task: the dataset's recorded env would be made
        dataset = f"evil/pendulum/{planted}-v0"
        found.append((f"d4rl_cql.py --dataset {dataset}", d4rl(f"--dataset {dataset} --epoch 1 --step-per-epoch 2")))
    for flag in ("--logdir", "--dataset", "--config"):
        found.append((f"d4rl_cql.py {flag} <non-UTF-8 byte>", [*d4rl(f"{TINY} --epoch 1"), flag, odd]))
    for name in ("missing.pth", "damaged.pth", "random.pth", "objects.pth", files["policy"], ".", "text.hdf5"):
        found.append((f"d4rl_cql.py --resume-path {Path(name).name}", d4rl(f"--resume-path {name}")))
    found.append(("d4rl_cql.py --watch --resume-path damaged.pth", d4rl("--watch --resume-path damaged.pth")))
    found.append(("d4rl_cql.py --resume-path <checkpoint> --epoch 2 --hidden-sizes 64",
                  d4rl(f"--resume-path {files['checkpoint']} --epoch 2 --hidden-sizes 64")))  # fmt: skip
    online = str(ROOT / "examples/atari_qrdqn.py")
    for flag in ("--training-num 100000", "--hidden-sizes 100000 100000", "--batch-size 100000000",
                 "--buffer-size 0", "--eps-test 2", "--task Pendulum-v1"):  # fmt: skip
        found.append((f"atari_qrdqn.py {flag}", command(online, "--task", "CartPole-v1", *flag.split())))
    atari = str(ROOT / "examples/atari_cql.py")
    for buffer in ("missing.hdf5", "text.hdf5", "empty.hdf5", "truncated.hdf5", "evil.hdf5", "evil/cartpole/call-v0",
                   files["dataset"]):  # fmt: skip
        short = ["--epoch", "1", "--step-per-epoch", "2"]
        found.append((f"atari_cql.py --load-buffer-name {Path(buffer).name}",
                      command(atari, "--load-buffer-name", buffer, *short)))  # fmt: skip
    for flag in ("--num-quantiles 0", "--cql-weight nan", "--batch-size 1e9", "--task Nonexistent-v0"):
        found.append((f"atari_cql.py {flag}", command(atari, "--task", "CartPole-v1", "--load-buffer-name",
                                                      "cartpole.hdf5", *flag.split())))  # fmt: skip
    for target in ("evil.hdf5", "text.hdf5", "empty.hdf5", "missing.hdf5", "random.pth", "evil/pendulum/call-v0"):
        found.append((f"describe {target}", command("-m", "offline_rl.describe", target)))
    for target in ("missing", "a-folder", "a-file"):
        found.append((f"results {target}", command("-m", "offline_rl.results", target)))
    collect = ["-m", "offline_rl.collect", "--task", "Pendulum-v1", "--size", "50", "--no-progress"]
    for flag in (
        "--size 0",
        "--size 1e3",
        "--num-envs 0",
        "--noise-std -1",
        "--format parquet",
        "--output a-folder",
        "--output /proc/x.hdf5",
        "--policy missing.pth",
        "--policy objects.pth",
        "--policy damaged.pth",
    ):
        found.append((f"collect {flag}", command(*collect, "--output", "made.hdf5", *flag.split())))
    for sweep in (*SWEEPS, "missing.yaml", "syntax.yaml"):
        found.append((f"sweep {sweep}", command("-m", "offline_rl.sweep", sweep)))
    sweep = ["-m", "offline_rl.sweep", "--example", "d4rl_cql", "--dry-run"]
    for flag in ("--grid seed", "--grid seed=1,1", "--grid seed=x"):
        found.append((f"sweep {flag}", command(*sweep, *flag.split())))
    for flag in ("--name ..", "--jobs -1", "--jobs 1.5"):
        found.append((f"sweep {flag}", command(*sweep, "--grid", "seed=0,1", *flag.split())))
    rlu = str(ROOT / "converters/rl_unplugged_atari.py")
    for flag in ("--run-id 0", "--shard-file missing.tfrecord", "--workers 0", "--shard-file text.hdf5"):
        found.append((f"rl_unplugged_atari.py {flag}", command(rlu, "--output", "out.hdf5", *flag.split())))
    return found


def malicious_torch_files(folder: Path, policy_file: str) -> dict[str, Path]:
    """Sixteen torch files whose loading would run a command (or take the machine's memory), each
    another way a pickle can ask for it."""
    import functools
    import subprocess as processes
    import zipfile
    from collections import OrderedDict

    import numpy as np
    import torch

    marker = folder / PAYLOAD
    shell = f"touch {marker}"

    class Calls:  # unpickling it calls `function(*arguments)`
        def __init__(self, function: object, *arguments: object) -> None:
            self.reduced = (function, arguments)

        def __reduce__(self) -> tuple[object, ...]:
            return self.reduced

    def torch_file_with(name: str, pickled: bytes) -> Path:
        """A torch zip archive whose data.pkl is `pickled`."""
        path = folder / "torch" / name
        torch.save({"x": 1}, path)
        with zipfile.ZipFile(path) as archive:
            records = {entry: archive.read(entry) for entry in archive.namelist()}
        records[next(entry for entry in records if entry.endswith("/data.pkl"))] = pickled
        with zipfile.ZipFile(path, "w") as archive:
            for entry, data in records.items():
                archive.writestr(entry, data)
        return path

    def saved(name: str, payload: object, **options: object) -> Path:
        path = folder / "torch" / name
        torch.save(payload, path, **options)  # type: ignore[arg-type]
        return path

    (folder / "torch").mkdir()
    policy = torch.load(policy_file, weights_only=True)
    tiny = torch.zeros(4)
    made = {
        "os.system": saved("system.pth", {"algorithm": _Payload(shell)}),
        "subprocess.getoutput": saved("getoutput.pth", Calls(processes.getoutput, shell)),
        "subprocess.Popen": saved("popen.pth", Calls(processes.Popen, ["touch", str(marker)])),
        "builtins.eval": saved("eval.pth", Calls(eval, f"__import__('os').system({shell!r})")),
        "functools.partial, called": saved("partial.pth", Calls(functools.partial(os.system, shell))),
        "a payload deep in a checkpoint": saved("deep.pth", {"config": {"run": {"seed": [0, {"x": _Payload(shell)}]}}}),
        "a payload among a policy file's keys": saved("policy-keys.pth", {**policy, "metadata": _Payload(shell)}),
        "the legacy (pre-zip) format": saved("legacy.pth", _Payload(shell), _use_new_zipfile_serialization=False),
        "a plain pickle file": folder / "torch/plain.pth",
        "protocol 0 GLOBAL and REDUCE": torch_file_with("global.pth", f"cos\nsystem\n(S'{shell}'\ntR.".encode()),
        "protocol 0 INST": torch_file_with("inst.pth", f"(S'{shell}'\nios\nsystem\n.".encode()),
        "protocol 4 STACK_GLOBAL": torch_file_with("stack-global.pth", pickle.dumps(_Payload(shell), protocol=4)),
        "getattr on __import__": torch_file_with(
            "getattr.pth",
            f"c__builtin__\ngetattr\n(c__builtin__\n__import__\n(S'os'\ntRS'system'\ntR(S'{shell}'\ntR.".encode(),
        ),
        "a numpy object array holding a payload": saved(
            "numpy-objects.pth", {"random_state": np.array([_Payload(shell)], dtype=object)}
        ),
        "a tensor shaped beyond its storage": saved(
            "outsized.pth",
            {
                "algorithm": {
                    "w": Calls(
                        torch._utils._rebuild_tensor_v2,
                        tiny.untyped_storage(),
                        0,
                        (10**12,),
                        (1,),
                        False,
                        OrderedDict(),
                    )
                }
            },
        ),
        "a 100 GB bytearray": torch_file_with("bytearray.pth", b"c__builtin__\nbytearray\n(\x8a\x05\x00\xe8vH\x17tR."),
    }
    made["a plain pickle file"].write_bytes(pickle.dumps({"algorithm": _Payload(shell)}))
    return made


# Cases whose right answer is to go on: describing a dataset reads its recorded env spec as text.
GOES_ON = {"describe evil/pendulum/call-v0"}


def judge(done: subprocess.CompletedProcess[str], folder: Path, name: str = "") -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip() and "%|" not in line]  # bars aside
    if (folder / PAYLOAD).exists():
        (folder / PAYLOAD).unlink()  # the next case starts without it
        return "PAYLOAD RAN"
    if name in GOES_ON and done.returncode == 0:
        return "went on, nothing ran"
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
            outcome = judge(done, folder, name)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1][:110]
            print(f"| {name} | {outcome} | {time.perf_counter() - start:.1f} | {last.replace('|', '/')} |", flush=True)
        print("\n" + ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items())))
        refused = 0
        torch_files = malicious_torch_files(folder, files["policy"]) if "torch" in only or not only else {}
        if torch_files:
            print("\n| malicious torch file | --resume-path | collect --policy |\n|---|---|---|")
        for name, path in torch_files.items():
            answers = []
            for argv in (d4rl(f"--resume-path {path}"), command("-m", "offline_rl.collect", "--policy", str(path),
                                                               "--output", "made.hdf5", "--size", "10")):  # fmt: skip
                done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
                answers.append(judge(done, folder))
            refused += answers == ["one line", "one line"]
            print(f"| {name} | {answers[0]} | {answers[1]} |", flush=True)
        if torch_files:
            print(f"\n{refused} of {len(torch_files)} malicious torch files refused in one line by both commands")


if __name__ == "__main__":
    main()
