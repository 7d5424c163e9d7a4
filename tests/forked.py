"""Programs a test runs as a user would, each in a process of its own, forked from one that has already
imported torch, Tianshou and offline_rl's programs.

A fresh interpreter spends seconds importing what every offline_rl program imports, and many tests run
a program in a process of its own only to send it a signal, to watch its output or to read its exit
status. `Popen` and `run` here answer as `subprocess`'s do, for `python SCRIPT ...`, `python -m MODULE
...` and `python -c PROGRAM ...` (a `preexec_fn` must be a module-level function: it is called by
name): the program runs in a child of a server that imported those modules
once (one server per test process, started at its first use), with the given working folder,
environment, standard streams and arguments, Python's own signal handlers, and the exit status a fresh
interpreter would give. The server imports nothing that reads its environment when imported (MuJoCo
reads MUJOCO_GL, wandb its settings), so the children read theirs. Tests about the interpreter's own
start (what `--help` imports, how long it takes) keep using `subprocess`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# What the server imports before it forks: offline_rl first (TensorBoard without TensorFlow, Triton
# before TensorFlow), then what its programs import.
PRELOADED = (
    "offline_rl",
    "torch",
    "torch._dynamo",
    "torch.utils.tensorboard",
    "tianshou",
    "offline_rl.cli.d4rl_cql",
    "offline_rl.cli.atari_cql",
    "offline_rl.runs.training",
)

SERVER = r"""
import atexit, importlib, io, json, os, random, runpy, selectors, signal, socket, sys, tempfile, threading, traceback

for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
base_path = list(sys.path[1:])


def reopened(descriptor, mode):
    # Python's own streams for a new process: line-buffered on a terminal, stderr always; unbuffered under -u.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED")) or request_unbuffered
    raw = io.FileIO(descriptor, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8")
    writer = raw if unbuffered else io.BufferedWriter(raw)
    line = raw.isatty() or descriptor == 2
    errors = "backslashreplace" if descriptor == 2 else "strict"
    return io.TextIOWrapper(writer, encoding="utf-8", errors=errors, line_buffering=line, write_through=unbuffered)


def print_uncaught():
    kind, value, trace = sys.exc_info()
    traceback.print_exception(kind, value, trace.tb_next)  # from the program's frames on, as Python prints it


def run(request, descriptors):
    global request_unbuffered
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
        os.close(descriptor)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    request_unbuffered = request["unbuffered"]
    sys.stdin, sys.stdout, sys.stderr = reopened(0, "r"), reopened(1, "w"), reopened(2, "w")
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler)
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    if request["preexec"]:  # a module-level function, by name
        module, _, name = request["preexec"].partition(":")
        getattr(importlib.import_module(module), name)()
    tempfile.tempdir = None  # read TMPDIR again
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    kind, target, arguments = request["kind"], request["target"], request["arguments"]
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    first = {"script": os.path.dirname(os.path.realpath(target)), "module": os.getcwd(), "program": ""}[kind]
    sys.path[:] = [first, *[entry for entry in extra if entry not in base_path], *base_path]
    code = 0
    try:
        if kind == "script":
            sys.argv = [target, *arguments]
            runpy.run_path(target, run_name="__main__")
        elif kind == "module":
            sys.argv = [target, *arguments]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *arguments]
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
    except SystemExit as exited:
        if exited.code is None:
            code = 0
        elif isinstance(exited.code, int):
            code = exited.code
        else:
            print(exited.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        print_uncaught()
        code = -signal.SIGINT
    except BaseException:
        print_uncaught()
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if code == -signal.SIGINT:  # as Python ends on an uncaught KeyboardInterrupt: by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def serve(path):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C of the test run is the test process's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    waiting = {}  # pid -> the connection that asked for it
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # closed when the test process ends
    while True:
        for key, _ in selector.select(timeout=0.02):
            if key.fileobj is sys.stdin:
                if not os.read(0, 1024):
                    return
                continue
            connection, _ = listener.accept()
            message, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, 3)
            while not message.endswith(b"\n"):
                message += connection.recv(1 << 16)
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                for other in waiting.values():
                    other.close()
                connection.close()
                run(json.loads(message), descriptors)
            for descriptor in descriptors:
                os.close(descriptor)
            connection.sendall(f"{pid}\n".encode())
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            try:
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            connection.close()


request_unbuffered = False
serve(sys.argv[1])
"""

_ENVIRONMENT = dict(os.environ)  # as the test process started, before any test changed it
_server: tuple[subprocess.Popen[bytes], str] | None = None
_starting = threading.Lock()  # a sweep starts its trials from several threads at once


def _socket_path() -> str:
    with _starting:
        return _started_server()


def _started_server() -> str:
    global _server
    if _server is None or _server[0].poll() is not None:
        folder = tempfile.mkdtemp(prefix="offline-rl-forks-")
        path = os.path.join(folder, "socket")
        repo = str(Path(__file__).resolve().parents[1])
        env = {**_ENVIRONMENT, "PYTHONPATH": repo + os.pathsep + _ENVIRONMENT.get("PYTHONPATH", "")}
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER, path, json.dumps(PRELOADED)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=folder,
        )
        assert process.stdout is not None and process.stdout.readline() == b"ready\n", "the fork server did not start"
        _server = (process, path)
        atexit.register(_stop, process)
    return _server[1]


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    shutil.rmtree(os.path.dirname(process.args[3]), ignore_errors=True)  # its socket's folder


def _parse(args: list[str]) -> tuple[str, str, list[str], bool]:
    """(kind, target, arguments, -u given) of `python [-u] SCRIPT|-m MODULE|-c PROGRAM ARGS...`."""
    if not args or args[0] != sys.executable:
        raise ValueError(f"not a command of this interpreter: {args[:2]}")
    rest, unbuffered = list(args[1:]), False
    if rest and rest[0] == "-u":
        rest, unbuffered = rest[1:], True
    if rest[0] == "-m":
        return "module", rest[1], rest[2:], unbuffered
    if rest[0] == "-c":
        return "program", rest[1], rest[2:], unbuffered
    if rest[0].startswith("-"):
        raise ValueError(f"an interpreter option the fork server does not take: {rest[0]}")
    return "script", str(rest[0]), rest[1:], unbuffered


class Popen:
    """The part of `subprocess.Popen` the tests use, for a program run by the fork server."""

    def __init__(
        self,
        args: list[Any],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        stdin: int | Any = subprocess.DEVNULL,
        stdout: int | Any = None,
        stderr: int | Any = None,
        text: bool = False,
        start_new_session: bool = False,
        preexec_fn: Any = None,
    ) -> None:
        self.args = [str(arg) for arg in args]
        kind, target, arguments, unbuffered = _parse(self.args)
        self.returncode: int | None = None
        self.text = text
        ours, theirs = [], []
        for number, wanted in enumerate((stdin, stdout, stderr)):
            if wanted == subprocess.PIPE:
                read, write = os.pipe()
                ours.append(write if number == 0 else read)
                theirs.append(read if number == 0 else write)
            elif wanted == subprocess.DEVNULL:
                ours.append(None)
                theirs.append(os.open(os.devnull, os.O_RDWR))
            elif wanted == subprocess.STDOUT and number == 2:
                ours.append(None)
                theirs.append(os.dup(theirs[1]))
            elif wanted is None:
                ours.append(None)
                theirs.append(os.dup(number))
            elif hasattr(wanted, "fileno"):  # an open file: the child writes to it too
                ours.append(None)
                theirs.append(os.dup(wanted.fileno()))
            else:
                raise ValueError(f"stream {number}: {wanted!r} is not taken here")
        self.stdin = os.fdopen(ours[0], "w" if text else "wb") if ours[0] is not None else None
        self.stdout = os.fdopen(ours[1], "r" if text else "rb") if ours[1] is not None else None
        self.stderr = os.fdopen(ours[2], "r" if text else "rb") if ours[2] is not None else None
        request = {
            "kind": kind,
            "target": target,
            "arguments": arguments,
            "unbuffered": unbuffered,
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "env": dict(os.environ if env is None else env),
            "sigint_ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
            "new_session": start_new_session,
            "preexec": f"{preexec_fn.__module__}:{preexec_fn.__qualname__}" if preexec_fn else None,
        }
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._connection.connect(_socket_path())
        try:
            message = (json.dumps(request) + "\n").encode()
            socket.send_fds(self._connection, [message[: 1 << 15]], theirs)
            self._connection.sendall(message[1 << 15 :])
        finally:
            for descriptor in theirs:
                os.close(descriptor)
        self._answer = b""
        self.pid = int(self._line())

    def _line(self, timeout: float | None = None) -> bytes:
        """The server's next line: the child's pid, then its exit status."""
        self._connection.settimeout(timeout)
        while b"\n" not in self._answer:
            try:
                piece = self._connection.recv(64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            if not piece:
                raise RuntimeError("the fork server ended before the program")
            self._answer += piece
        line, self._answer = self._answer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout=0.001)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._line(timeout))
            self._connection.close()
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Everything left on the child's stdout and stderr, read until both close; then its exit status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.stdin is not None:
            self.stdin.close()
        streams = [stream for stream in (self.stdout, self.stderr) if stream is not None and not stream.closed]
        pieces: dict[Any, list[bytes]] = {stream: [] for stream in streams}
        with selectors.DefaultSelector() as selector:
            for stream in streams:
                selector.register(stream.fileno(), selectors.EVENT_READ, stream)
            while selector.get_map():
                left = None if deadline is None else max(deadline - time.monotonic(), 0)
                if left == 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in selector.select(left):
                    piece = os.read(key.fd, 1 << 16)
                    if piece:
                        pieces[key.data].append(piece)
                    else:
                        selector.unregister(key.fd)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
        results = []
        for stream in (self.stdout, self.stderr):
            if stream is None:
                results.append(None)
                continue
            data = b"".join(pieces.get(stream, []))
            stream.close()
            results.append(data.decode() if self.text else data)
        return results[0], results[1]


def run(
    args: list[Any],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    capture_output: bool = False,
    text: bool = False,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` for a program run by the fork server."""
    pipe = subprocess.PIPE if capture_output else None
    process = Popen(args, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=text)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode or 0, out, err)


class Subprocess:
    """What a module that starts programs with `subprocess.Popen` finds as its `subprocess` when a test has
    its programs forked by the server instead (`monkeypatch.setattr(module, "subprocess", Subprocess)`)."""

    PIPE, STDOUT, DEVNULL = subprocess.PIPE, subprocess.STDOUT, subprocess.DEVNULL
    TimeoutExpired = subprocess.TimeoutExpired
    Popen = Popen
