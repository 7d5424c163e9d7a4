"""The preset files of TD3+BC (configs/td3_bc/), IQL (configs/iql/), ReBRAC (configs/rebrac/), BC
(configs/bc/) and BC-10% (configs/bc_10/): one per D4RL dataset CORL runs each on, CORL's values, loaded
exactly, described exactly by their pages' tables."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_presets import ADROIT, ANTMAZE, LOCOMOTION, MAZE2D, assert_loads_as_written

from conftest import REPO_ROOT
from offline_rl.cli import d4rl_bc, d4rl_iql, d4rl_rebrac, d4rl_td3_bc
from offline_rl.cli.presets import load_preset

FOLDERS: dict[str, tuple[Callable[[list[str]], Any], str]] = {
    "td3_bc": (d4rl_td3_bc.config_from_args, "td3-bc.md"),
    "iql": (d4rl_iql.config_from_args, "iql.md"),
    "rebrac": (d4rl_rebrac.config_from_args, "rebrac.md"),
    "bc": (d4rl_bc.config_from_args, "bc.md"),
    "bc_10": (d4rl_bc.config_from_args, "bc.md"),
}
ALL_DATASETS = LOCOMOTION + ANTMAZE + ADROIT + MAZE2D
DATASETS = {folder: ALL_DATASETS for folder in FOLDERS} | {
    "rebrac": LOCOMOTION + ANTMAZE + ADROIT + [f"maze2d-{maze}-v1" for maze in ("umaze", "medium", "large")]
}
PRESETS = [(folder, path) for folder in FOLDERS for path in sorted((REPO_ROOT / "configs" / folder).glob("*.yaml"))]


@pytest.mark.parametrize("folder", FOLDERS)
def test_there_is_one_preset_per_corl_dataset(folder: str) -> None:
    stems = sorted(path.stem for path in (REPO_ROOT / "configs" / folder).glob("*.yaml"))
    assert stems == sorted(DATASETS[folder])


@pytest.mark.parametrize(("folder", "path"), PRESETS, ids=lambda value: getattr(value, "stem", value))
def test_a_preset_loads_with_exactly_the_values_in_its_file(folder: str, path: Path) -> None:
    assert assert_loads_as_written(path, FOLDERS[folder][0]).dataset == path.stem


def test_the_td3_bc_presets_hold_corls_values() -> None:
    for path in (REPO_ROOT / "configs" / "td3_bc").glob("*.yaml"):
        config = d4rl_td3_bc.config_from_args(["--config", str(path)])
        algo, run = config.algorithm, config.run
        assert (algo.alpha, algo.policy_noise, algo.noise_clip, algo.policy_freq) == (2.5, 0.2, 0.5, 2)
        assert (algo.actor_lr, algo.critic_lr, algo.tau, algo.gamma) == (3e-4, 3e-4, 5e-3, 0.99)
        assert algo.hidden_sizes == [256, 256] and algo.normalize_obs and not algo.normalize_reward
        assert run.epoch * run.step_per_epoch == 1_000_000 and run.step_per_epoch == 5000 and run.batch_size == 256
        maze = path.stem.startswith(("antmaze", "maze2d"))
        assert run.test_num == (100 if maze else 10), path.stem
        assert algo.reward_bias == (-1.0 if path.stem.startswith("antmaze") else 0.0), path.stem


def test_the_iql_presets_hold_corls_values() -> None:
    for path in (REPO_ROOT / "configs" / "iql").glob("*.yaml"):
        config = d4rl_iql.config_from_args(["--config", str(path)])
        algo, name = config.algorithm, path.stem
        assert (algo.actor_lr, algo.critic_lr, algo.value_lr, algo.max_weight) == (3e-4, 3e-4, 3e-4, 100.0)
        assert algo.actor_schedule == "cosine" and algo.schedule_updates is None and algo.hidden_sizes == [256, 256]
        assert config.run.epoch * config.run.step_per_epoch == 1_000_000 and config.run.batch_size == 256
        hopper_special = name in ("hopper-medium-v2", "hopper-medium-replay-v2")
        assert algo.deterministic_actor == hopper_special and algo.normalize_reward == hopper_special, name
        assert algo.tau == (0.001 if hopper_special else 0.005), name
        expected = {"antmaze": (0.9, 10.0), "pen": (0.8, 3.0), "door": (0.8, 3.0), "hammer": (0.8, 3.0)}
        expected |= {"relocate": (0.8, 3.0), "hopper-medium-expert-v2": (0.5, 6.0)}
        key = name if name in expected else name.split("-")[0]
        assert (algo.expectile, algo.temperature) == expected.get(key, (0.7, 3.0)), name
        assert algo.reward_bias == (-1.0 if name.startswith("antmaze") else 0.0), name


REBRAC_PENALTIES = {  # (β_actor, β_critic) of the authors' files, as CORL keeps them
    "halfcheetah": {"random": (0.001, 0.1), "medium": (0.001, 0.01), "medium-replay": (0.01, 0.001)},
    "hopper": {"random": (0.001, 0.01), "medium": (0.01, 0.01), "medium-replay": (0.05, 0.5)},
    "walker2d": {"random": (0.01, 0.0), "medium": (0.05, 0.1), "medium-replay": (0.05, 0.01)},
}


def test_the_rebrac_presets_hold_the_authors_values() -> None:
    for env, kinds in REBRAC_PENALTIES.items():
        for kind, penalties in kinds.items():
            config = d4rl_rebrac.config_from_args(["--config", str(REPO_ROOT / f"configs/rebrac/{env}-{kind}-v2.yaml")])
            algo = config.algorithm
            assert (algo.actor_bc_weight, algo.critic_bc_weight) == penalties, (env, kind)
            assert (algo.actor_lr, algo.critic_lr, config.run.batch_size) == (1e-3, 1e-3, 1024)
    for path in (REPO_ROOT / "configs" / "rebrac").glob("*.yaml"):
        config = d4rl_rebrac.config_from_args(["--config", str(path)])
        algo, run = config.algorithm, config.run
        assert algo.hidden_sizes == [256, 256, 256] and algo.critic_layer_norm and algo.normalize_q
        assert not algo.normalize_obs and (algo.policy_noise, algo.noise_clip, algo.policy_freq) == (0.2, 0.5, 2)
        assert run.epoch * run.step_per_epoch == 1_000_000
        if path.stem.startswith("antmaze"):
            assert (algo.gamma, algo.critic_lr, algo.reward_scale, run.step_per_epoch) == (0.999, 5e-5, 100.0, 50_000)


@pytest.mark.parametrize(("folder", "fraction"), [("bc", 1.0), ("bc_10", 0.1)])
def test_the_bc_presets_hold_corls_values(folder: str, fraction: float) -> None:
    for path in (REPO_ROOT / "configs" / folder).glob("*.yaml"):
        config = d4rl_bc.config_from_args(["--config", str(path)])
        assert config.algorithm.top_fraction == fraction and config.algorithm.hidden_sizes == [256, 256]
        assert config.algorithm.actor_lr == 3e-4 and config.algorithm.normalize_obs
        assert config.run.test_num == (100 if path.stem.startswith(("antmaze", "maze2d")) else 10)


def page_tables(page: str) -> list[list[tuple[list[str], list[str]]]]:
    """(preset names, flags) of each row, per table, of an algorithm page's preset section."""
    text = (REPO_ROOT / "docs" / "pages" / "algorithms" / page).read_text(encoding="utf-8")
    section = text[text.index("## Preset files") :]
    tables: list[list[tuple[list[str], list[str]]]] = []
    for block in re.split(r"\n\s*\n", section):
        rows = []
        for line in block.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) == 2 and cells[1].startswith("`--"):
                rows.append((re.findall(r"`([a-z0-9-]+-v[12])`", cells[0]), shlex.split(cells[1].strip("`"))))
        if rows:
            tables.append(rows)
    return tables


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_pages_table_says_exactly_what_each_preset_sets(folder: str) -> None:
    parse, page = FOLDERS[folder]
    tables = page_tables(page)
    rows = tables[1] if folder == "bc_10" else tables[0]
    assert sorted(name for names, _ in rows for name in names) == sorted(DATASETS[folder])
    for names, flags in rows:
        from_flags = parse(flags)
        for name in names:
            path = REPO_ROOT / "configs" / folder / f"{name}.yaml"
            from_file = parse(["--config", str(path)])
            assert dataclasses.replace(from_file, task=from_flags.task, dataset=from_flags.dataset) == from_flags, name
            keys = {key.replace("-", "_") for key in load_preset(path)} - {"task", "dataset"}
            spelled = {
                flag[2:].replace("-", "_").split("=")[0].removeprefix("no_") for flag in flags if flag[:2] == "--"
            }
            assert keys <= spelled, (name, keys - spelled)


def test_a_td3_bc_preset_given_to_the_cql_program_is_refused_in_one_line(tmp_path: Path) -> None:
    from conftest import run_in_process

    path = REPO_ROOT / "configs/td3_bc/hopper-medium-v2.yaml"
    done = run_in_process("examples/d4rl_cql.py", "--config", str(path), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "examples/d4rl_td3_bc.py" in line, line
