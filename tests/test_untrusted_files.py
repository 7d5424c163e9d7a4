"""A file from elsewhere never runs code: payloads planted in a Tianshou HDF5 buffer (a pickle) and in
a Minari dataset's recorded env spec (an entry point `gym.make` would import and call) are refused in
one line, and the marker each payload would write never appears."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch

from conftest import record_minari_dataset, run_in_process
from offline_rl.core.errors import DatasetError, OfflineRLError, OfflineRLWarning
from offline_rl.data import load_buffer, load_dataset, save_buffer


class _Payload:
    """Pickles to a call of `os.system`: what an attacker plants."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (self.command,)


def _pendulum_buffer(path: Path) -> Any:
    """A Tianshou buffer of Pendulum-v1 transitions."""
    from tianshou.data import Batch, ReplayBuffer

    buffer = ReplayBuffer(20)
    rng = np.random.default_rng(0)
    for step in range(20):
        buffer.add(
            Batch(
                obs=rng.normal(size=3).astype(np.float32),
                act=rng.uniform(-2, 2, size=1).astype(np.float32),
                rew=-1.0,
                obs_next=rng.normal(size=3).astype(np.float32),
                terminated=False,
                truncated=step % 10 == 9,
                info={},
            )
        )
    return buffer


def _pendulum_buffer_file(path: Path) -> Path:
    """`_pendulum_buffer` in Tianshou's HDF5 layout."""
    return save_buffer(_pendulum_buffer(path), path)


def _plant(path: Path, key: str, marker: Path) -> None:
    """Replace the pickled value at `key` (or add one there) with a payload that would write `marker`."""
    payload = np.frombuffer(pickle.dumps(_Payload(f"touch {marker}")), dtype=np.byte)
    with h5py.File(path, "a") as file:
        if key in file:
            del file[key]
        file.create_dataset(key, data=payload)
        file[key].attrs["__data_type__"] = "str"


@pytest.mark.parametrize("key", ["_random_state", "dataset_info/name"])
def test_a_pickle_planted_in_a_buffer_file_never_runs(tmp_path: Path, key: str) -> None:
    path = _pendulum_buffer_file(tmp_path / "evil.hdf5")
    if key.startswith("dataset_info/"):
        with h5py.File(path, "a") as file:
            file.create_group("dataset_info")
    marker = tmp_path / "ran"
    _plant(path, key, marker)
    for load in (load_buffer, load_dataset):
        with pytest.raises(DatasetError) as caught:
            load(path)
        message = str(caught.value)
        assert f"evil.hdf5: '/{key}' is pickled and refers to posix.system" in message, message
        assert "\n" not in message
    programs = [
        ("-m offline_rl.describe", str(path)),
        ("examples/d4rl_cql.py", "--dataset", str(path), "--task", "Pendulum-v1", "--epoch", "1"),
        ("examples/atari_cql.py", "--load-buffer-name", str(path), "--task", "CartPole-v1", "--epoch", "1"),
    ]
    for program, *args in programs:
        result = run_in_process(program, *args, cwd=tmp_path)
        assert result.returncode == 2, (program, result.stderr[-2000:])
        assert "Traceback" not in result.stderr and f"'/{key}' is pickled" in result.stderr, result.stderr
    assert not marker.exists()


def test_the_plain_values_tianshou_pickles_still_load(tmp_path: Path) -> None:
    """The writer pickles strings, None, lists, tuples, numpy object arrays and its random state: all
    read back as they were."""
    from offline_rl.data.transitions import dataset_info, set_dataset_info

    path = tmp_path / "plain.hdf5"
    buffer = _pendulum_buffer(path)
    set_dataset_info(buffer, {"name": "plain", "none": None, "list": [1, "a"], "tuple": (2.5, None)})
    object.__setattr__(buffer, "objects", np.array([None, "x", 3], dtype=object))
    save_buffer(buffer, path)
    loaded = load_buffer(path)
    assert dataset_info(loaded) == {"name": "plain", "none": None, "list": [1, "a"], "tuple": (2.5, None)}
    assert list(loaded.objects) == [None, "x", 3]
    assert isinstance(loaded._random_state, np.random.RandomState)


def _minari_dataset_with_spec(dataset_id: str, task: str, spec: dict[str, Any]) -> None:
    """A Minari dataset of `task` whose recorded evaluation env spec is replaced by `spec` (written into
    its metadata.json, as a dataset folder from elsewhere would hold it)."""
    record_minari_dataset(dataset_id, gym.make(task), 30, gym.spec(task))
    metadata_file = Path(os.environ["MINARI_DATASETS_PATH"]) / dataset_id / "data/metadata.json"
    metadata = json.loads(metadata_file.read_text())
    recorded = json.loads(metadata["eval_env_spec"])
    metadata["eval_env_spec"] = json.dumps({**recorded, **spec})
    metadata_file.write_text(json.dumps(metadata))


@pytest.mark.parametrize(
    "planted",
    [
        {"entry_point": "subprocess:getoutput", "kwargs": {"cmd": "touch {marker}"}},
        # a function inside a trusted package is not an env class either (this one would register the above)
        {
            "entry_point": "gymnasium.envs.registration:register",
            "kwargs": {"id": "Evil-v0", "entry_point": "subprocess:getoutput", "kwargs": {"cmd": "touch {marker}"}},
        },
        {
            "additional_wrappers": [
                {"name": "Evil", "entry_point": "subprocess:getoutput", "kwargs": {"cmd": "touch {marker}"}}
            ]
        },
    ],
)
def test_a_minari_env_spec_from_elsewhere_is_never_made(tmp_path: Path, planted: dict[str, Any]) -> None:
    marker = tmp_path / "ran"
    planted = json.loads(json.dumps(planted).replace("{marker}", str(marker)))
    _minari_dataset_with_spec("test/pendulum/evil-v0", "Pendulum-v1", planted)
    _minari_dataset_with_spec("test/cartpole/evil-v0", "CartPole-v1", planted)
    named = planted.get("entry_point") or planted["additional_wrappers"][0]["entry_point"]
    common = ("--dataset", "test/pendulum/evil-v0", "--epoch", "1", "--step-per-epoch", "2", "--test-num", "1")
    small = ("--batch-size", "8", "--hidden-sizes", "8", "--critic-layers", "1")
    refused = run_in_process("examples/d4rl_cql.py", *common, *small, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: test/pendulum/evil-v0: the env spec names ") and f"'{named}'" in last, last
    assert "--task" in last
    # the way out: --task evaluates on the registered env, and says so
    with pytest.warns(OfflineRLWarning) as warned:
        chosen = run_in_process("examples/d4rl_cql.py", *common, *small, "--task", "Pendulum-v1", cwd=tmp_path)
    assert chosen.returncode == 0, chosen.stderr[-2000:]
    said = [str(warning.message) for warning in warned if f"'{named}'" in str(warning.message)]
    assert said and said[0].endswith("evaluating on the registered Pendulum-v1"), said
    # discrete CQL reads a recorded spec the same way
    discrete = run_in_process("examples/atari_cql.py", "--load-buffer-name", "test/cartpole/evil-v0", cwd=tmp_path)
    assert discrete.returncode == 2 and "Traceback" not in discrete.stderr, discrete.stderr[-2000:]
    last = discrete.stderr.strip().splitlines()[-1]
    assert last.startswith("error: test/cartpole/evil-v0: the env spec names ") and "--task" in last, last
    assert not marker.exists()


def test_make_env_refuses_an_untrusted_spec_whoever_passes_it(tmp_path: Path) -> None:
    import dataclasses

    from offline_rl.envs.make import make_env

    marker = tmp_path / "ran"
    spec = dataclasses.replace(
        gym.spec("Pendulum-v1"), entry_point="subprocess:getoutput", kwargs={"cmd": f"touch {marker}"}
    )
    with pytest.raises(OfflineRLError, match=r"--task 'Pendulum-v1': the env spec names 'subprocess:getoutput'"):
        make_env("Pendulum-v1", spec=spec)
    assert not marker.exists()


# --- a damaged copy ----------------------------------------------------------------------------------


def _flip_bytes_inside(path: Path, pattern: bytes, count: int = 5) -> None:
    """Flip `count` bytes of `path` where `pattern` (a tensor's bytes) is stored: the file still loads."""
    data = bytearray(path.read_bytes())
    start = data.index(pattern)
    for offset in range(count):
        data[start + 8 * offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_checkpoint_or_policy_file_with_flipped_bytes_is_refused_in_one_line(tmp_path: Path) -> None:
    from offline_rl.algorithms.export.policy_file import PolicyNetwork, load_policy, save_policy
    from offline_rl.runs.checkpoint import load_checkpoint, save_checkpoint

    network = torch.nn.Linear(16, 16)
    with torch.no_grad():
        network.weight.copy_(torch.arange(256, dtype=torch.float32).reshape(16, 16) / 7)
    pattern = network.weight.detach().numpy().tobytes()[:64]
    checkpoint = save_checkpoint(tmp_path / "checkpoint.pth", network, epoch=3)
    assert load_checkpoint(checkpoint)["epoch"] == 3
    _flip_bytes_inside(checkpoint, pattern)
    altered = torch.load(checkpoint, weights_only=True)["algorithm"]["weight"]
    assert not torch.equal(altered, network.weight.detach())  # torch itself loads the altered weights
    with pytest.raises(OfflineRLError, match=rf"^--resume-path {re.escape(str(checkpoint))}: damaged: .*checksum"):
        load_checkpoint(checkpoint)

    policy = PolicyNetwork(16, 2, [16])
    with torch.no_grad():
        next(policy.parameters()).copy_(torch.arange(256, dtype=torch.float32).reshape(16, 16) / 7)
    path = save_policy(policy, tmp_path / "behaviour_policy.pt")
    load_policy(path)
    _flip_bytes_inside(path, pattern)
    with pytest.raises(OfflineRLError, match=rf"^{re.escape(str(path))}: damaged: "):
        load_policy(path)


def test_a_checkpoint_written_before_checksums_still_loads(tmp_path: Path) -> None:
    from offline_rl.runs.checkpoint import CHECKPOINT_FORMAT, load_checkpoint

    path = tmp_path / "checkpoint.pth"
    torch.save({"format": CHECKPOINT_FORMAT, "algorithm": torch.nn.Linear(2, 2).state_dict(), "epoch": 4}, path)
    assert load_checkpoint(path)["epoch"] == 4


@pytest.mark.parametrize("kind", ["a plain pickle", "torch.save with pickle protocol 4"])
def test_a_torch_file_pickled_another_way_runs_nothing_and_is_one_line(tmp_path: Path, kind: str) -> None:
    """A payload in a file pickled with another protocol is refused like any other, and torch's note on
    the protocol no longer comes before the error as a second line."""
    marker, path = tmp_path / "ran", tmp_path / "checkpoint.pth"
    payload = {"format": "offline_rl.checkpoint", "algorithm": _Payload(f"touch {marker}")}
    if kind == "a plain pickle":
        path.write_bytes(pickle.dumps(payload, protocol=4))
    else:
        torch.save(payload, path, pickle_protocol=4)
    for flags in (["--resume-path", str(path)], ["--watch", "--resume-path", str(path)]):
        done = run_in_process("examples/d4rl_cql.py", *flags, cwd=tmp_path)
        assert done.returncode == 2 and not marker.exists()
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: --resume-path {path}: "), line
    import warnings

    from offline_rl.algorithms.export.policy_file import load_policy
    from offline_rl.runs.checkpoint import load_checkpoint

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(OfflineRLError, match=rf"^{re.escape(str(path))}: "):
            load_policy(path)
        with pytest.raises(OfflineRLError, match=rf"^--resume-path {re.escape(str(path))}: "):
            load_checkpoint(path)
    assert not marker.exists() and [str(warning.message) for warning in said] == []
