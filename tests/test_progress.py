"""Progress output in a log file: plain lines, no carriage returns or escape codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_rl.core import progress


def test_a_bar_not_on_a_terminal_writes_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.progress_bar(total=1000, desc="collect", unit="step") as bar:
        for _ in range(1000):
            bar.update(1)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b[" not in err
    lines = err.splitlines()
    assert 1 <= len(lines) <= 3 and lines[-1].startswith("collect: 100%") and "1000/1000" in lines[-1]


def test_a_bar_that_a_terminal_would_erase_ends_with_its_final_line_in_a_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, the Minari loader's bar (leave=False) left "load minari: 0% ... 0/138" as its only line."""
    for _ in progress.progress_bar(range(138), desc="load minari", leave=False):
        pass
    lines = capsys.readouterr().err.splitlines()
    assert (
        lines[0].startswith("load minari:   0%")
        and lines[-1].startswith("load minari: 100%")
        and "138/138" in lines[-1]
    )


def test_a_log_gets_a_bars_final_line_once(capsys: pytest.CaptureFixture[str]) -> None:
    """An update that prints the final count already wrote the last line; closing adds it again only
    when something it shows changed since (a sweep's log ended with its `6/6` line twice)."""
    bar = progress.progress_bar(total=2, desc="sweep", unit="trial", mininterval=0)
    bar.update(1)
    bar.update(1)
    bar.close()
    finals = [line for line in capsys.readouterr().err.splitlines() if "2/2" in line]
    assert len(finals) == 1
    bar = progress.progress_bar(total=2, desc="sweep", unit="trial", mininterval=0)
    bar.update(2)
    bar.set_postfix_str("mean -1283.2", refresh=False)
    bar.close()
    finals = [line for line in capsys.readouterr().err.splitlines() if "2/2" in line]
    assert len(finals) == 2 and finals[-1].endswith("mean -1283.2]")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def train(monitor, clock: FakeClock, step: int, rate: float, seconds: float) -> int:
    """Feed `monitor` `seconds` of training at `rate` updates/s, one call per 0.5 s."""
    for _ in range(int(seconds / 0.5)):
        clock.now += 0.5
        step += int(rate * 0.5)
        monitor.updated(step)
    return step


def test_training_without_a_terminal_prints_a_line_per_interval() -> None:
    from offline_rl.runs.update_rate import UpdateRateMonitor

    clock, lines = FakeClock(), []
    monitor = UpdateRateMonitor(slowdown_hint="", line_interval_s=60, clock=clock, write=lines.append)
    train(monitor, clock, 0, rate=100, seconds=150)
    assert lines == ["update 6050: 100.0 updates/s", "update 12050: 100.0 updates/s"]
    env_steps = UpdateRateMonitor(
        slowdown_hint="", counted="env step", line_interval_s=60, clock=clock, write=lines.append
    )
    train(env_steps, clock, 0, rate=90, seconds=70)
    assert lines[-1] == "env step 5445: 90.0 env steps/s"


def test_a_run_that_knows_its_end_says_the_training_time_left() -> None:
    from offline_rl.runs.update_rate import UpdateRateMonitor, time_left

    clock, lines = FakeClock(), []
    monitor = UpdateRateMonitor(slowdown_hint="", line_interval_s=60, clock=clock, write=lines.append, total=400_000)
    train(monitor, clock, 0, rate=100, seconds=70)
    assert lines == ["update 6050 of 400000: 100.0 updates/s, 1 h 06 min of training left"]  # 393 950 / 100 s
    assert [time_left(s) for s in (20, 31, 719, 3600, 3599 * 3)] == [
        "under a minute", "1 min", "12 min", "1 h 00 min", "3 h 00 min",
    ]  # fmt: skip


def test_a_logger_keeps_logging_and_feeds_the_monitor() -> None:
    from offline_rl.runs.update_rate import watch_update_rate

    class Recording:
        def __init__(self) -> None:
            self.updates: list[int] = []
            self.tests: list[int] = []
            self.pauses = 0

        def log_update_data(self, log_data: dict, step: int) -> None:
            self.updates.append(step)

        def log_test_data(self, log_data: dict, step: int) -> None:
            self.tests.append(step)

        def updated(self, step: int) -> None:
            self.updates.append(-step)

        def paused(self) -> None:
            self.pauses += 1

    logger, monitor = Recording(), Recording()
    watch_update_rate(logger, monitor)
    logger.log_update_data({}, 3)
    logger.log_test_data({}, 5)
    assert logger.updates == [3] and monitor.updates == [-3] and logger.tests == [5] and monitor.pauses == 1


def test_a_collapsed_update_rate_is_reported_once_with_the_likely_cause() -> None:
    from offline_rl.runs.update_rate import UpdateRateMonitor, slowdown_hint

    clock, lines = FakeClock(), []
    hint = slowdown_hint("cpu", 2)
    monitor = UpdateRateMonitor(slowdown_hint=hint, line_interval_s=None, clock=clock, write=lines.append)
    step = train(monitor, clock, 0, rate=150, seconds=30)
    step = train(monitor, clock, step, rate=100, seconds=30)  # slower, but not far below: no notice
    assert lines == []
    step = train(monitor, clock, step, rate=10, seconds=60)  # another process took the cores
    assert len(lines) == 1 and "10.0 updates/s, under 1/4 of the 150.0/s this run reached earlier" in lines[0]
    assert lines[0].endswith(hint) and "--threads 1" in hint
    train(monitor, clock, step, rate=5, seconds=60)
    assert len(lines) == 1  # once


def test_evaluations_between_epochs_are_not_a_slowdown() -> None:
    from offline_rl.runs.update_rate import UpdateRateMonitor

    clock, lines = FakeClock(), []
    monitor = UpdateRateMonitor(slowdown_hint="", line_interval_s=None, clock=clock, write=lines.append)
    step = train(monitor, clock, 0, rate=150, seconds=30)
    for _ in range(5):  # an epoch ends: a 60 s evaluation with no updates, then training again
        clock.now += 60
        monitor.paused()
        step = train(monitor, clock, step, rate=150, seconds=12)
    assert lines == [] and monitor.best_rate == 150


def test_a_run_slow_from_its_start_is_compared_with_what_the_machine_gave_the_same_settings(tmp_path: Path) -> None:
    """Runs started beside other work crawled from their first window, so their own best was their
    slow pace and no notice came: the machine's record of the same settings is the expected rate."""
    from offline_rl.runs.update_rate import MachineRates, UpdateRateMonitor, compared_with_the_machine

    settings = {"algorithm": {"cql_weight": 5.0}, "batch_size": 256, "device": "cpu", "threads": 1}
    clock, lines = FakeClock(), []
    alone = compared_with_the_machine(
        UpdateRateMonitor(slowdown_hint="", line_interval_s=None, clock=clock, write=lines.append),
        MachineRates(tmp_path / "rates.json", settings),
    )
    train(alone, clock, 0, rate=120, seconds=30)  # a run alone on the machine: its rate is recorded
    assert lines == [] and MachineRates(tmp_path / "rates.json", settings).best() == 120.0

    crowded = compared_with_the_machine(
        UpdateRateMonitor(slowdown_hint="hint", line_interval_s=None, clock=clock, write=lines.append),
        MachineRates(tmp_path / "rates.json", settings),
    )
    train(crowded, clock, 0, rate=20, seconds=30)  # slow from its first window
    assert len(lines) == 1 and "20.0 updates/s, under 1/4 of the 120.0/s a run of these settings" in lines[0]
    other = compared_with_the_machine(  # other settings have a record of their own
        UpdateRateMonitor(slowdown_hint="", line_interval_s=None, clock=clock, write=lines.append),
        MachineRates(tmp_path / "rates.json", {**settings, "batch_size": 4096}),
    )
    train(other, clock, 0, rate=20, seconds=30)
    assert len(lines) == 1
