"""Progress output in a log file: plain lines, no carriage returns or escape codes."""

from __future__ import annotations

import pytest

from offline_rl import progress


def test_a_bar_not_on_a_terminal_writes_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.progress_bar(total=1000, desc="collect", unit="step") as bar:
        for _ in range(1000):
            bar.update(1)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b[" not in err
    lines = err.splitlines()
    assert 1 <= len(lines) <= 3 and lines[-1].startswith("collect: 100%") and "1000/1000" in lines[-1]


def test_training_without_a_terminal_prints_a_line_per_interval(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_rl.apps import training

    class RecordingLogger:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def log_update_data(self, log_data: dict, step: int) -> None:
            self.steps.append(step)

    monkeypatch.setattr(training, "PROGRESS_LINE_INTERVAL_S", 0.0)
    logger = training.progress_lines(RecordingLogger())
    for step in (1, 2, 3):
        logger.log_update_data({}, step)
    assert logger.steps == [1, 2, 3]  # the logger still logs everything
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["update 2", "update 3"] and "updates/s" in lines[0]
