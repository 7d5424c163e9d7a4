"""The README's library script (between its `library-run` markers) runs as written: the data command
first, then the Python block, which must train through Tianshou's trainer and print its last evaluation.
Only the training budget is cut, so that a stale import, a renamed argument or a changed return in the
README fails here rather than in a reader's first try."""

from __future__ import annotations

import re
import runpy
import shlex
from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_in_process

BUDGET = "max_epochs=2,"
EPOCH_UPDATES = "epoch_num_steps=200,"


def library_run_blocks() -> tuple[str, str]:
    """(the bash block's command, the Python block) between the README's library-run markers."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("<!-- library-run -->", 1)[1].split("<!-- /library-run -->", 1)[0]
    bash = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    python = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert bash and python, "README.md's library-run section needs a bash block and a python block"
    return bash.group(1).strip(), python.group(1)


def test_readme_library_script_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    command, script = library_run_blocks()
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "offline_rl.collect"], command
    collected = run_in_process("-m offline_rl.collect", *words[3:], cwd=tmp_path)
    assert collected.returncode == 0, collected.stderr[-2000:]

    assert BUDGET in script and EPOCH_UPDATES in script, "the budget this test shortens has moved"
    short = script.replace(BUDGET, "max_epochs=1,").replace(EPOCH_UPDATES, "epoch_num_steps=20,")
    path = tmp_path / "library_run.py"
    path.write_text(short, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(path), run_name="__main__")

    printed = capsys.readouterr().out
    assert "transitions" in printed  # the dataset summary
    match = re.search(r"last evaluation: return (-?\d+\.\d) ± (\d+\.\d)", printed)
    assert match, printed[-2000:]
    assert -2000 < float(match.group(1)) < 0  # Pendulum's returns: a real rollout of the trained policy
    assert int(namespace["algorithm"].num_updates) == 20  # trained by the trainer, on the shortened budget
