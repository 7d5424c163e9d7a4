"""`--load-buffer-name` patterns, which sweep files and presets give and no shell expands: a DQN Replay
run's 51 converted files as one pattern, and a sweep over games whose files are named alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_rl.cli.atari_cql import buffer_files
from offline_rl.core.errors import OfflineRLError


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_a_pattern_becomes_its_files_in_the_shells_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in (0, 1, 10, 2):
        touch(tmp_path / "Pong" / "1" / f"ckpt_{index}-first_0.01.hdf5")
    touch(tmp_path / "Pong" / "1" / "ckpt_3.hdf5")  # a whole checkpoint: not the pattern's
    monkeypatch.setenv("HOME", str(tmp_path))
    files = buffer_files(["~/Pong/1/ckpt_*-first_0.01.hdf5"])
    assert [Path(f).name for f in files] == [f"ckpt_{i}-first_0.01.hdf5" for i in ("0", "1", "10", "2")]
    assert all(Path(f).is_file() for f in files)


def test_names_without_a_pattern_or_that_exist_stay_as_given(tmp_path: Path) -> None:
    bracketed = touch(tmp_path / "expert[1].hdf5")  # a pattern's characters in a real file's name
    names = [str(bracketed), "D4RL/pong/expert-v0", "expert.hdf5"]
    assert buffer_files(names) == tuple(names)


def test_a_pattern_that_matches_nothing_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(OfflineRLError, match=r"^--load-buffer-name .*ckpt_\*\.hdf5: no file matches this pattern$"):
        buffer_files([str(tmp_path / "ckpt_*.hdf5")])


def test_a_sweep_over_games_names_each_trial_after_its_game(tmp_path: Path) -> None:
    """Every game's files are named alike (`ckpt_*-first_0.01.hdf5`), so trial folders take as much of
    the path as tells the values apart."""
    from offline_rl.sweep.spec import load_spec

    sweep = tmp_path / "atari.yaml"
    sweep.write_text(
        "name: atari\nexample: atari_cql\ngrid:\n  load_buffer_name:\n"
        "    - ~/buffers/Pong/1/ckpt_*-first_0.01.hdf5\n    - ~/buffers/Breakout/1/ckpt_*-first_0.01.hdf5\n"
        "  seed: [0, 1]\n"
    )
    ids = [trial.id for trial in load_spec(sweep).trials()]
    assert ids == [
        "load_buffer_name=Pong-1-ckpt_--first_0.01.hdf5__seed=0",
        "load_buffer_name=Pong-1-ckpt_--first_0.01.hdf5__seed=1",
        "load_buffer_name=Breakout-1-ckpt_--first_0.01.hdf5__seed=0",
        "load_buffer_name=Breakout-1-ckpt_--first_0.01.hdf5__seed=1",
    ]
    sweep.write_text("name: d\nexample: atari_cql\ngrid:\n  load_buffer_name: [data/a.hdf5, data/b.hdf5]\n")
    assert [trial.id for trial in load_spec(sweep).trials()] == ["load_buffer_name=a.hdf5", "load_buffer_name=b.hdf5"]
