"""The update rate of a training run (or, for the online trainer, its environment-step rate),
watched while it trains.

Two things a user cannot see otherwise: in a log file (no progress bar) that a long epoch is moving,
and, anywhere, that the run slowed down because something else took the machine. On a busy CPU,
torch's threads spin while waiting for each other, and a run can fall to a tenth of its rate.
The expected rate is the best this run, or an earlier run of the same settings on the same machine
(`MachineRates`), reached, over windows of training only: evaluations and checkpoints happen between
windows, so they never count as a slowdown. The machine's record catches a run that was slow from its
first window (started beside other work), which its own best alone would take as its normal pace.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import write_json

log = logging.getLogger(__name__)

LINE_INTERVAL_S = 60.0
"""Without a terminal, one `update N: R updates/s` (or `env step N: ...`) line this often."""
WINDOW_S = 10.0
"""Training time per rate measurement."""
COLLAPSE_FACTOR = 4.0
"""A window this many times slower than the run's best one is reported (once)."""


class UpdateRateMonitor:
    """Fed the update counter as training logs it (`updated`) and told when training pauses for an
    evaluation (`paused`); prints the periodic lines and the one slowdown notice. `counted` names
    what the counter counts ("update", or "env step" for the online trainer)."""

    def __init__(
        self,
        *,
        slowdown_hint: str,
        counted: str = "update",
        line_interval_s: float | None = LINE_INTERVAL_S,
        window_s: float = WINDOW_S,
        collapse_factor: float = COLLAPSE_FACTOR,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], None] = print,
        total: int | None = None,
    ) -> None:
        self.slowdown_hint, self.counted, self.total = slowdown_hint, counted, total
        self.line_interval_s, self.window_s, self.collapse_factor = line_interval_s, window_s, collapse_factor
        self.clock, self.write = clock, write
        self.best_rate: float | None = None
        self.machine_rate: float | None = None  # the best of earlier runs of these settings here
        self.on_rate: Callable[[float], None] | None = None  # told every window's rate (`MachineRates.keep`)
        self.warned = False
        self._window: tuple[float, int] | None = None  # (start time, start step) of the running window
        self._line: tuple[float, int] | None = None

    def updated(self, step: int) -> None:
        now = self.clock()
        if self._window is None:
            self._window = (now, step)
        elif now - self._window[0] >= self.window_s:
            rate = (step - self._window[1]) / (now - self._window[0])
            self._judge(rate, step)
            self._window = (now, step)
        if self.line_interval_s is None:
            return
        if self._line is None:
            self._line = (now, step)
        elif now - self._line[0] >= self.line_interval_s:
            rate = (step - self._line[1]) / (now - self._line[0])
            self.write(self._line_text(step, rate))
            self._line = (now, step)

    def _line_text(self, step: int, rate: float) -> str:
        """`update N: R updates/s`, with the run's end and the training time left at this rate where known."""
        if self.total is None or rate <= 0:
            return f"{self.counted} {step}: {rate:.1f} {self.counted}s/s"
        left = time_left(max(self.total - step, 0) / rate)
        return f"{self.counted} {step} of {self.total}: {rate:.1f} {self.counted}s/s, {left} of training left"

    def paused(self) -> None:
        """Training stopped for a while (an evaluation): the next windows start after it."""
        self._window = self._line = None

    def _judge(self, rate: float, step: int) -> None:
        if self.on_rate is not None:
            self.on_rate(rate)
        own = self.best_rate
        if own is None or rate > own:
            self.best_rate = rate
        expected, whose = max(
            ((own, "this run reached earlier"), (self.machine_rate, "a run of these settings reached on this machine")),
            key=lambda option: option[0] or 0.0,
        )
        if not self.warned and expected is not None and rate * self.collapse_factor < expected:
            self.warned = True
            self.write(
                f"{self.counted} {step}: {rate:.1f} {self.counted}s/s, under 1/{self.collapse_factor:g} of the "
                f"{expected:.1f}/s {whose}; {self.slowdown_hint}"
            )


def time_left(seconds: float) -> str:
    """`seconds` as a person reads a time left: "under a minute", "12 min", "3 h 05 min"."""
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


UPDATE_RATES_FILE = "update_rates.json"
"""Beside the registry of running runs: the best rate each set of settings reached on this machine."""


class MachineRates:
    """The best update rate runs of each set of settings reached on this machine, one small JSON file
    beside the registry of running runs (`offline_rl.core.resources.RunRegistry`), keyed by a hash of
    the settings that set the pace (algorithm, batch, device, threads). Written whole by whichever
    run improves it; a record lost to two runs writing at once only delays a notice."""

    def __init__(self, path: Path, settings: Any) -> None:
        self.path = path
        self.key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _record(self) -> dict[str, Any]:
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return record if isinstance(record, dict) else {}

    def best(self) -> float | None:
        value = self._record().get(self.key)
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def keep(self, rate: float) -> None:
        record = self._record()
        known = record.get(self.key)
        if isinstance(known, int | float) and rate <= known:
            return
        record[self.key] = rate
        with contextlib.suppress(OSError, OfflineRLError):  # a record that cannot be written only loses the comparison
            write_json(self.path, record)


def compared_with_the_machine(monitor: UpdateRateMonitor, rates: MachineRates) -> UpdateRateMonitor:
    """`monitor` expecting at least the rate earlier runs of the same settings reached here, and
    keeping its own when better."""
    monitor.machine_rate, monitor.on_rate = rates.best(), rates.keep
    return monitor


def watch_update_rate(logger: Any, monitor: UpdateRateMonitor) -> Any:
    """`logger` (a Tianshou logger) with `monitor` fed by its update and evaluation logging."""
    log_update_data = logger.log_update_data

    def log_update(log_data: dict, step: int) -> None:
        log_update_data(log_data, step)
        monitor.updated(step)

    logger.log_update_data = log_update
    return pause_at_evaluations(logger, monitor)


def pause_at_evaluations(logger: Any, monitor: UpdateRateMonitor) -> Any:
    """`logger` telling `monitor` each time an evaluation is logged (training paused for it)."""
    log_test_data = logger.log_test_data

    def log_test(log_data: dict, step: int) -> None:
        log_test_data(log_data, step)
        monitor.paused()

    logger.log_test_data = log_test
    return logger


def slowdown_hint(device: str, threads: int) -> str:
    """What most likely slowed a run down, and what to do about it."""
    if device.startswith("cuda"):
        return "another process is probably using this GPU or its CPU core (nvidia-smi shows which)"
    return (
        f"other processes are probably busy on this machine's cores, and torch's {threads} thread(s) wait "
        "for them; stop them, or restart with --threads 1 (--resume-path continues the run)"
    )


def update_rate_monitor(
    device: str, threads: int, counted: str = "update", *, total: int | None = None
) -> UpdateRateMonitor:
    """The monitor for a run that ends at `total` of what it counts: periodic lines (with the training
    time left) only without a terminal (the progress bar shows the rate on one), the slowdown notice on both."""
    on_terminal = sys.stderr.isatty()
    return UpdateRateMonitor(
        slowdown_hint=slowdown_hint(device, threads),
        counted=counted,
        line_interval_s=None if on_terminal else LINE_INTERVAL_S,
        write=log.info,
        total=total,
    )
