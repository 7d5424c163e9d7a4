"""Fixtures that write small datasets in the exact real formats (h5py for D4RL, Minari's own API)."""

from __future__ import annotations

# first, before any test module imports Tianshou or TensorFlow: TensorBoard without TensorFlow, and Triton
# (torch's CUDA builds) loaded before the RL Unplugged tests' TensorFlow (offline_rl.core.import_order says why)
import offline_rl  # noqa: F401

# isort: split

import ast
import fcntl
import http.server
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

import forked

REPO_ROOT = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Workers of a parallel run share the cores: torch's threads spin while they wait for each other,
    # so two workers' threads on the same cores stall each other. One thread each (and in the commands
    # the tests start, which inherit the variable) keeps every core busy with work instead.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def library_messages_printed() -> None:
    """The library's messages as the programs show them: plain lines on stdout (`run_main` does the same)."""
    from offline_rl.cli.main import print_library_messages

    print_library_messages()


@pytest.fixture(autouse=True)
def isolated_data_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point every dataset cache at a fresh folder so tests never see the user's data."""
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("OFFLINE_RL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in every test, as in a terminal's foreground, also when the
    suite runs as a script's background job (`pytest &`), whose shell starts it with SIGINT ignored.
    The tests that press Ctrl-C, in this process or in the commands they start (which inherit an
    ignored SIGINT), test what a user at a terminal gets; the ignored case has tests of its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def cpu_compiler() -> None:
    """Skips a test where torch.compile cannot build CPU code, as torch.compile itself says on a
    small function. Its C++ backend needs a C++ compiler (slim container images have none), and
    torch 2.13's linker command splits library folders at spaces (pytorch/pytorch#191010), so a venv
    under a path with a space cannot link. The examples never compile on a CPU; on CUDA a failed
    compilation falls back to the uncompiled update and says why."""
    import torch

    from offline_rl.algorithms.base import compiler_failure

    try:
        torch.compile(lambda x: x * 2.0 + 1.0, fullgraph=True)(torch.ones(3))
    except Exception as error:  # whatever the toolchain raises
        reason = compiler_failure(error)
        if any(character.isspace() for character in str(Path(torch.__file__).parent)):
            reason += " (torch is installed under a path with a space)"
        pytest.skip(f"torch.compile cannot build CPU code here: {reason[:200]}")
    finally:
        torch._dynamo.reset()


def write_d4rl_file(
    path: Path,
    *,
    extra: dict[str, np.ndarray] | None = None,
    **columns: np.ndarray,
) -> Path:
    """Write a D4RL-format file: the same flat keys D4RL's own HDF5 files hold.

    `columns` are D4RL keys (observations, actions, rewards, terminals, timeouts,
    next_observations); a test leaves one out to make a file that lacks it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as file:
        for key, value in {**columns, **(extra or {})}.items():
            file[key] = value
        length = len(next(iter(columns.values())))
        file["infos/qpos"] = np.zeros((length, 2))  # D4RL files carry infos/*: ignored
    return path


@pytest.fixture
def d4rl_writer() -> Callable[..., Path]:
    return write_d4rl_file


def episodes_to_arrays(lengths: list[int], ends: list[str], obs_dim: int = 3, act_dim: int = 2, seed: int = 0):
    """Flat D4RL columns for episodes of given lengths and end kinds ('terminal', 'timeout', 'none').

    Observation i is `[i, i, ...] + 0.5` (unique per step), and `next_observations` holds each
    step's true successor: the next row inside an episode, a fresh value `-(i + 1)` at its end.
    """
    rng = np.random.default_rng(seed)
    total = sum(lengths)
    obs = np.repeat(np.arange(total, dtype=np.float32)[:, None] + 0.5, obs_dim, axis=1)
    next_obs = np.empty_like(obs)
    next_obs[:-1] = obs[1:]
    terminals = np.zeros(total, dtype=bool)
    timeouts = np.zeros(total, dtype=bool)
    cursor = 0
    for length, end in zip(lengths, ends, strict=True):
        last = cursor + length - 1
        next_obs[last] = -(last + 1.0)
        if end == "terminal":
            terminals[last] = True
        elif end == "timeout":
            timeouts[last] = True
        cursor += length
    actions = rng.uniform(-1, 1, size=(total, act_dim)).astype(np.float32)
    rewards = rng.normal(size=total).astype(np.float32)
    return {
        "observations": obs,
        "actions": actions,
        "rewards": rewards,
        "terminals": terminals,
        "timeouts": timeouts,
        "next_observations": next_obs,
    }


def script_env() -> dict[str, str]:
    """Environment for running the repo's scripts in a subprocess."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_repo_script(
    script: str,
    *args: str,
    cwd: Path,
    env_extra: dict[str, str] | None = None,
    timeout: float = 600,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run one of the repo's command-line scripts (`examples/...`, `converters/...`) as a user would, in a
    process of its own: forked from one that has imported torch and Tianshou (`forked`), or with `fresh`
    in a new interpreter, for what depends on the interpreter's own start (imports, warnings shown once)."""
    return (subprocess.run if fresh else forked.run)(
        [sys.executable, str(REPO_ROOT / script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**script_env(), **(env_extra or {})},
        timeout=timeout,
    )


def rendered_frame_summary(env_id: str) -> str:
    """'(height, width, 3) True' when `env_id` renders an rgb_array frame of more than ten colours after a
    reset, offscreen through EGL as MuJoCo renders without a display (in a fresh interpreter, which EGL
    wants); otherwise the error's tail."""
    program = (
        "import offline_rl.envs.make, gymnasium as gym, numpy as np\n"
        f"env = gym.make({env_id!r}, render_mode='rgb_array'); env.reset(seed=0)\n"
        "frame = env.render(); env.close()\n"
        "print(frame.shape, len(np.unique(frame.reshape(-1, 3), axis=0)) > 10)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env={**script_env(), "MUJOCO_GL": "egl"}
    )
    return done.stdout.split("\n")[-2] if done.returncode == 0 else done.stderr[-2000:]


def load_benchmark(name: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """A benchmark module loaded as `python benchmarks/NAME.py` loads it: its siblings importable."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", REPO_ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def modules_imported_by(script: str, *argvs: list[str], watched: tuple[str, ...]) -> list[str]:
    """Which of the `watched` top-level modules a fresh interpreter has imported after running
    `script` (from the repo root, its own folder importable, as `python script` has it; or a module,
    `-m name`) once per argv;
    each run must end in exit status 0 or 2 (help, or a flag error)."""
    if script.startswith("-m "):  # a module, as `python -m offline_rl.collect` runs it
        folder, run = REPO_ROOT, f"runpy.run_module({script[3:]!r}, run_name='__main__', alter_sys=True)"
    else:
        path = REPO_ROOT / script
        folder, run = path.parent, f"runpy.run_path({str(path)!r}, run_name='__main__')"
    program = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        f"for argv in {[list(argv) for argv in argvs]!r}:\n"
        "    sys.argv = ['prog', *argv]\n"
        "    try:\n"
        f"        {run}\n"
        "    except SystemExit as exited:\n"
        "        assert exited.code in (0, 2), exited.code\n"
        f"print(sorted(name for name in {watched!r} if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=script_env(), cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


# The programs behind the scripts, for `run_in_process`.
_PROGRAMS = {
    "examples/d4rl_cql.py": ("offline_rl.examples.d4rl_cql", "main"),
    "examples/d4rl_td3_bc.py": ("offline_rl.examples.d4rl_td3_bc", "main"),
    "examples/d4rl_bc.py": ("offline_rl.examples.d4rl_bc", "main"),
    "examples/d4rl_rebrac.py": ("offline_rl.examples.d4rl_rebrac", "main"),
    "examples/d4rl_iql.py": ("offline_rl.examples.d4rl_iql", "main"),
    "examples/atari_cql.py": ("offline_rl.examples.atari_cql", "main"),
    "examples/atari_qrdqn.py": ("offline_rl.examples.atari_qrdqn", "main"),
    "examples/mujoco_sac.py": ("offline_rl.examples.mujoco_sac", "main"),
    "converters/rl_unplugged_atari.py": ("offline_rl.cli.convert_rl_unplugged", "main"),
    "converters/dqn_replay_atari.py": ("offline_rl.cli.convert_dqn_replay", "main"),
    "converters/d4rl.py": ("offline_rl.cli.convert_buffers", "convert_d4rl"),
    "converters/minari.py": ("offline_rl.cli.convert_buffers", "convert_minari"),
    "-m offline_rl.collect": ("offline_rl.collect", "main"),
    "-m offline_rl.describe": ("offline_rl.cli.describe", "main"),
}


def run_in_process(
    script: str, *args: str, cwd: Path, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`run_repo_script` without a new interpreter: the same `main` behind the same `run_main` wrapper
    (one-line errors, exit statuses), its output captured. Saves the ~4 s of importing torch and
    Tianshou per run; the tests that check the interpreter's start (imports, --help) use a subprocess."""
    import contextlib
    import importlib
    import io

    from offline_rl.cli.main import run_main
    from offline_rl.envs import mujoco as mujoco_margins

    module, function = _PROGRAMS[script]
    main = getattr(importlib.import_module(module), function)
    mujoco_margins._ANNOUNCED.clear()  # a new interpreter has said no contacts line yet
    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    os.environ.update(env_extra or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                run_main(main, list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess([script, *args], code, out.getvalue(), err.getvalue())


# One Ray cluster for the whole test run, however many pytest-xdist workers share it: the machine has
# one Ray port. The first test that needs it starts it (under a lock the workers share); the run's
# controlling process stops it when the run ends.
RAY_DIR_VARIABLE = "OFFLINE_RL_TEST_RAY_DIR"


# The files that take longest, longest first. With `--dist loadfile` pytest-xdist hands each worker
# whole files in the order collected (told not to reorder them by their count of tests): starting the
# long files first lets the short ones fill in, so that the workers end together.
LONGEST_FIRST = [
    "test_sweep.py", "test_video.py", "test_interrupts.py", "test_rl_unplugged.py", "test_wandb_logging.py",
    "test_dqn_replay.py", "test_kill_harness.py", "test_presets.py", "test_results.py", "test_atari_pipeline.py",
    "test_d4rl_adroit.py", "test_policy_export.py", "test_evaluation_loop.py", "test_minari_atari.py",
    "test_update_paths.py", "test_d4rl.py", "test_bad_input.py", "test_d4rl_cql_example.py",
]  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process; workers inherit its environment
        os.environ[RAY_DIR_VARIABLE] = tempfile.mkdtemp(prefix="offline-rl-test-ray-")
        if hasattr(config.option, "loadscopereorder"):
            config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or RAY_DIR_VARIABLE not in os.environ:
        return
    folder = Path(os.environ.pop(RAY_DIR_VARIABLE))
    if (folder / "started").exists():
        ray = Path(sys.executable).with_name("ray")
        subprocess.run([str(ray), "stop", "--force"], capture_output=True, env=script_env(), timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_address() -> str:
    """A real Ray cluster on this machine (`ray start --head`, 2 CPUs) for the tests that run on Ray;
    the commands reach it as `--ray-address auto`, as they would reach a cluster's head node."""
    folder = Path(os.environ[RAY_DIR_VARIABLE])
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "started").exists():
            ray = Path(sys.executable).with_name("ray")
            command = [str(ray), "start", "--head", "--num-cpus", "2", "--include-dashboard", "false"]
            started = subprocess.run(
                [*command, "--disable-usage-stats"], capture_output=True, text=True, env=script_env(), timeout=180
            )
            assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
            (folder / "started").touch()
    return "auto"


def synthetic_frame_stack_buffer(transitions: int, seed: int):
    """A FrameStackBuffer of noise frames, episodes of 100 steps."""
    from offline_rl.data.frame_stack import FrameStackBuffer

    rng = np.random.default_rng(seed)
    episodes = transitions // 100
    frames = rng.integers(0, 256, size=(transitions + episodes, 84, 84), dtype=np.uint8)
    first = np.repeat(np.arange(episodes) * 101, 100)
    newest = first + np.tile(np.arange(100), episodes)
    terminated = np.zeros(transitions, dtype=bool)
    terminated[99::100] = True
    return FrameStackBuffer(
        frames=frames,
        frame_index=newest,
        episode_first_frame=first,
        act=rng.integers(0, 6, transitions),
        rew=rng.normal(size=transitions).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros(transitions, dtype=bool),
    )


def record_minari_dataset(
    dataset_id: str, env: Any, steps: int, eval_env: Any, seed: int = 0, **metadata: Any
) -> list[Any]:
    """A dataset recorded from `env` with random actions, written by Minari's own
    `create_dataset_from_buffers` with `env` and `eval_env` as its specs (Minari's DataCollector
    would need jax), `metadata` (reference scores) passed on. Observations are copied as they come
    (an env may hand out one dict object per call, as Franka Kitchen does) and may be nested dicts.
    Returns the episodes written."""
    import inspect
    import warnings

    import minari
    from minari.data_collector import EpisodeBuffer

    def copied(obs: Any) -> Any:
        return {key: copied(value) for key, value in obs.items()} if isinstance(obs, dict) else np.array(obs)

    def stacked(observations: list[Any]) -> Any:
        if isinstance(observations[0], dict):
            return {key: stacked([o[key] for o in observations]) for key in observations[0]}
        return np.stack(observations)

    episodes: list[Any] = []
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards, terminations, truncations = [copied(obs)], [], [], [], []
    for step in range(steps):
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        actions.append(action)
        observations.append(copied(obs))
        rewards.append(float(reward))
        terminations.append(terminated)
        truncations.append(truncated or step == steps - 1)
        if terminated or truncations[-1]:
            episodes.append(
                EpisodeBuffer(
                    id=len(episodes),
                    observations=stacked(observations),
                    actions=np.stack(actions),
                    rewards=np.array(rewards),
                    terminations=np.array(terminations),
                    truncations=np.array(truncations),
                    infos={},
                )
            )
            obs, _ = env.reset()
            observations, actions, rewards, terminations, truncations = [copied(obs)], [], [], [], []
    if "jpeg_encoding" not in inspect.signature(minari.create_dataset_from_buffers).parameters:
        metadata.pop("jpeg_encoding", None)  # before Minari 0.5.4 (its first) its HDF5 files hold images raw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        minari.create_dataset_from_buffers(
            dataset_id, episodes, env=env.spec, eval_env=eval_env, algorithm_name="random", **metadata
        )
    return episodes


CUT_AFTER = 1000
"""Bytes a `/cut/...` response sends before closing the connection (the first `/flaky/...` one too)."""
SLOW_CHUNK, SLOW_PAUSE_S = 1 << 16, 0.02
"""A `/slow/...` file is sent a chunk at a time with a pause between: 3 MiB take about a second."""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder as a dataset mirror does (an ETag per file; `Range`, with `If-Range`), noting each
    path asked for (`paths_served`) and each `Range` (`ranges_asked`). Each `/cut/NAME` response
    announces the rest of NAME and sends its next `CUT_AFTER` bytes only; `/flaky/NAME` does so the
    first time it is asked for, then sends it whole; `/rangeonly/NAME` is `/flaky/` from a server that
    ignores `If-Range`; `/slow/NAME` sends it slowly."""

    paths_served: list[str]
    ranges_asked: list[str | None]

    def log_message(self, *_: object) -> None:  # no request lines among the test's output
        pass

    def do_GET(self) -> None:
        first_time = self.path not in self.paths_served
        self.paths_served.append(self.path)
        self.ranges_asked.append(self.headers.get("Range"))
        kind, _, name = self.path.lstrip("/").partition("/")
        if kind not in ("cut", "flaky", "rangeonly", "slow"):
            kind, name = "", self.path.lstrip("/")
        file = Path(self.directory, urllib.parse.unquote(name))
        if not file.is_file():
            self.send_error(404, "File not found")
            return
        body = file.read_bytes()
        version = f'"{zlib.crc32(body):08x}"'
        asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        same = self.headers.get("If-Range", version) == version or kind == "rangeonly"
        start = int(asked.group(1)) if asked and same else 0
        self.send_response(206 if start else 200)
        self.send_header("ETag", version)
        self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        rest = body[start:]
        if kind == "cut" or (kind in ("flaky", "rangeonly") and first_time):
            self.wfile.write(rest[:CUT_AFTER])
            self.close_connection = True
        elif kind == "slow":
            for offset in range(0, len(rest), SLOW_CHUNK):
                self.wfile.write(rest[offset : offset + SLOW_CHUNK])
                time.sleep(SLOW_PAUSE_S)
        else:
            self.wfile.write(rest)


def paths_served() -> list[str]:
    """The paths the `http_server` of the running test was asked for, in order."""
    return _Handler.paths_served


def ranges_asked() -> list[str | None]:
    """The `Range` header of each request to the `http_server` (None: the whole file), in order."""
    return _Handler.ranges_asked


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real HTTP server on this machine: its root URL and the folder it serves (a mirror for downloads)."""
    served = tmp_path / "served"
    served.mkdir()
    _Handler.paths_served, _Handler.ranges_asked = [], []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    httpd.shutdown()
    httpd.server_close()


def damaged_copy(data: bytes, rng: np.random.Generator, structure: int = 4096) -> bytes:
    """`data` as a bad copy leaves it: 1 to 5 bytes changed, most of them in the first `structure` bytes,
    where an HDF5 file keeps its superblock, object headers, B-trees and heaps."""
    damaged = bytearray(data)
    for _ in range(rng.integers(1, 6)):
        near_start = rng.random() < 0.7
        damaged[rng.integers(min(structure, len(damaged)) if near_start else len(damaged))] = rng.integers(256)
    return bytes(damaged)


def in_forked_child(work: Callable[[], str], timeout: float = 60) -> str:
    """`work()`'s string, computed in a forked child process. Some damaged files make the HDF5 library
    itself crash (a segfault) or loop forever, which no Python code can catch; in a child that costs the
    test one outcome, `crashed` or `hung`, instead of the whole pytest run. An exception `work` lets
    through is `raised <type>: <message>`."""
    import select
    import traceback

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report in one write, then leave without running pytest's cleanup
        os.close(read_end)
        try:
            result = work()
        except BaseException as error:  # reported to the parent, which asserts on it
            frame = traceback.extract_tb(error.__traceback__)[-1]
            result = f"raised {type(error).__name__}: {error} (at {frame.filename}:{frame.lineno})"
        os.write(write_end, result.encode()[:60_000])
        os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        result = os.read(read_end, 60_000).decode()
        _, status = os.waitpid(pid, 0)
        return "crashed" if os.WIFSIGNALED(status) or not result else result
    finally:
        os.close(read_end)
