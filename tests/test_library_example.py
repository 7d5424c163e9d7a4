"""`examples/library_cql.py` runs as written, on a shorter budget: it makes its dataset with the Python
API, trains through Tianshou's trainer and prints its last evaluation, so that a stale import, a renamed
argument or a changed return fails here rather than in a reader's first try."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT

SHORTER = {"EPOCHS = 2": "EPOCHS = 1", "UPDATES_PER_EPOCH = 200": "UPDATES_PER_EPOCH = 20", "size=20_000": "size=2_000"}


def test_the_library_example_trains_through_tianshous_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = (REPO_ROOT / "examples" / "library_cql.py").read_text(encoding="utf-8")
    for budget, shorter in SHORTER.items():
        assert budget in script, f"the budget this test shortens has moved: {budget}"
        script = script.replace(budget, shorter)
    path = tmp_path / "library_cql.py"
    path.write_text(script, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(path)])
    namespace = runpy.run_path(str(path), run_name="__main__")

    printed = capsys.readouterr().out
    assert "transitions: 2000" in printed  # the dataset it made and loaded
    assert (tmp_path / "pendulum-random.hdf5").is_file()
    match = re.search(r"20 updates; last evaluation: return (-?\d+\.\d) ± (\d+\.\d)", printed)
    assert match, printed[-2000:]
    assert -2000 < float(match.group(1)) < 0  # Pendulum's returns: a real rollout of the trained policy
    assert int(namespace["algorithm"].num_updates) == 20  # trained by the trainer, on the shortened budget
    saved = torch.load(tmp_path / "cql_policy.pth", weights_only=True)  # the weights it saved load back
    env = namespace["env"]
    rebuilt = namespace["CQLSAC"].build(env.observation_space, env.action_space, namespace["config"])
    rebuilt.policy.load_state_dict(saved)
    first = next(iter(saved))
    assert torch.equal(rebuilt.policy.state_dict()[first], namespace["algorithm"].policy.state_dict()[first])
