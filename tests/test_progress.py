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
