"""The preset files under configs/cql/: one per D4RL dataset CORL runs CQL on (locomotion, AntMaze, Adroit,
Maze2D), CORL's values, loaded exactly, and described exactly by the documentation's table."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO_ROOT
from offline_rl.cli import d4rl_cql
from offline_rl.cli.presets import load_preset
from offline_rl.core.settings import leaf_fields, spellings_of

PRESETS = sorted((REPO_ROOT / "configs" / "cql").glob("*.yaml"))
LOCOMOTION = [
    f"{env}-{kind}-v2"
    for env in ("halfcheetah", "hopper", "walker2d")
    for kind in ("random", "medium", "medium-replay", "medium-expert", "expert", "full-replay")
]
ANTMAZE = [
    f"antmaze-{maze}-v2"
    for maze in ("umaze", "umaze-diverse", "medium-play", "medium-diverse", "large-play", "large-diverse")
]
ADROIT = [
    f"{task}-{kind}-v1" for task in ("pen", "door", "hammer", "relocate") for kind in ("human", "cloned", "expert")
]
MAZE2D = [f"maze2d-{maze}{reward}-v1" for maze in ("umaze", "medium", "large") for reward in ("", "-dense")]


def field_values(config: object) -> dict[str, object]:
    """Every setting of a (nested) config, keyed by each of its spellings."""
    values = {}
    for _, field, owner in leaf_fields(config):
        for spelling in spellings_of(field):
            values[spelling[2:].replace("-", "_")] = getattr(owner, field.name)
    return values


def test_there_is_one_preset_per_corl_dataset() -> None:
    assert sorted(p.stem for p in PRESETS) == sorted(LOCOMOTION + ANTMAZE + ADROIT + MAZE2D)


AUTHORS_FILES = sorted((REPO_ROOT / "configs" / "cql_authors").glob("*.yaml"))
AUTHORS_PRESETS = [path for path in AUTHORS_FILES if not path.stem.startswith("atari")]  # d4rl_cql.py's
AUTHORS_ATARI_PRESETS = [path for path in AUTHORS_FILES if path.stem.startswith("atari")]  # atari_cql.py's


def assert_loads_as_written(path: Path, read: Callable[[list[str]], Any] = d4rl_cql.config_from_args) -> Any:
    """The preset at `path` read by a program's `config_from_args` (`read`), every value exactly as written."""
    config = read(["--config", str(path)])
    values = field_values(config)
    for key, expected in load_preset(path).items():
        actual = values[key.replace("-", "_")]
        if isinstance(expected, float) and math.isinf(expected):
            assert actual == expected, key
        else:
            assert actual == pytest.approx(expected) if isinstance(expected, float) else actual == expected, key
    return config


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_a_preset_loads_with_exactly_the_values_in_its_file(path: Path) -> None:
    assert assert_loads_as_written(path).dataset == path.stem


@pytest.mark.parametrize("path", AUTHORS_PRESETS, ids=lambda p: p.stem)
def test_a_cql_authors_preset_loads_with_exactly_the_values_in_its_file(path: Path) -> None:
    assert assert_loads_as_written(path).dataset is None  # any dataset: the paper's v0 ones, --dataset


def test_the_cql_authors_presets_hold_their_codes_values() -> None:
    """aviralkumar2907/CQL's README commands with `cql_mujoco_new.py`'s / `cql_antmaze_new.py`'s and
    rlkit CQLTrainer's defaults."""
    assert sorted(path.stem for path in AUTHORS_FILES) == ["antmaze", "atari-10pct", "atari-1pct", "mujoco"]
    configs = {path.stem: d4rl_cql.config_from_args(["--config", str(path)]) for path in AUTHORS_PRESETS}
    for config in configs.values():
        algo = config.algorithm
        assert (algo.actor_lr, algo.entropy_lr, algo.critic_lr, algo.alpha) == (1e-4, 1e-4, 3e-4, 1.0)
        assert algo.actor_hidden_sizes == [256] * 3 and algo.critic_hidden_sizes == [256] * 3
        assert algo.log_std_offset == 0.0 and not algo.normalize_obs and algo.bc_steps == 40_000
        assert algo.cql_weight == 5.0 and algo.importance_sample and algo.cql_n_actions == 10
        assert not algo.backup_entropy and not algo.max_target_backup and algo.temperature == 1.0
        assert config.run.epoch * config.run.step_per_epoch == 3_000_000
        # rlkit's evaluation: num_eval_steps_per_epoch 1000 on one env, discard_incomplete_paths
        assert (config.run.test_num, config.run.test_steps, config.run.test_steps_cut) == (1, 1000, True)
    mujoco, antmaze = configs["mujoco"].algorithm, configs["antmaze"].algorithm
    assert not mujoco.with_lagrange and (mujoco.reward_scale, mujoco.reward_bias) == (1.0, 0.0)
    assert antmaze.with_lagrange and antmaze.target_action_gap == 5.0 / 5.0  # lagrange_thresh / min_q_weight
    assert (antmaze.lagrange_multiplier_init, antmaze.lagrange_lr) == (1.0, 3e-4)
    assert (antmaze.lagrange_multiplier_min, antmaze.lagrange_multiplier_max) == (0.0, 1e6)
    assert (antmaze.reward_scale, antmaze.reward_bias) == (4.0, -2.0)  # (r − 0.5) · 4


@pytest.mark.parametrize("path", AUTHORS_ATARI_PRESETS, ids=lambda p: p.stem)
def test_a_cql_authors_atari_preset_loads_with_exactly_the_values_in_its_file(path: Path) -> None:
    from offline_rl.cli import atari_cql

    values = field_values(atari_cql.config_from_args(["--config", str(path)]))
    for key, expected in load_preset(path).items():
        assert values[key] == (pytest.approx(expected) if isinstance(expected, float) else expected), key


def test_the_cql_authors_atari_presets_hold_their_codes_values() -> None:
    """aviralkumar2907/CQL's atari/batch_rl/fixed_replay/configs/quantile.gin, in updates where it counts
    agent steps (an update every 4), and its README's weights: 4 for 1% of the data, 1 for 10%."""
    from offline_rl.cli import atari_cql

    configs = {path.stem: atari_cql.config_from_args(["--config", str(path)]) for path in AUTHORS_ATARI_PRESETS}
    assert sorted(configs) == ["atari-10pct", "atari-1pct"]
    for config in configs.values():
        algo, run = config.algorithm, config.run
        assert (algo.lr, algo.adam_eps) == (0.00005, 0.0003125)  # tf.train.AdamOptimizer's
        assert algo.num_quantiles == 200 and algo.gamma == 0.99 and algo.n_step == 1  # update_horizon
        assert algo.target_update_freq == 8000 // 4  # target_update_period (agent steps) / update_period
        assert run.step_per_epoch == 250_000 // 4 and run.epoch == 200  # training_steps; num_iterations
        assert run.batch_size == 32 and algo.eps_test == 0.001  # WrappedFixedReplayBuffer; epsilon_eval
        assert run.test_steps == 125_000  # evaluation_steps: whole games until that many agent steps
        assert algo.batch_per_file  # FixedReplayBuffer: each batch from one checkpoint's replay
        assert config.eval_env == "sticky" and config.task is None  # sticky_actions; the buffer's game
        assert algo.cnn == "dopamine" and algo.kappa == 1.0 and not algo.double_q and algo.reward_clip
    assert configs["atari-1pct"].algorithm.cql_weight == 4.0
    assert configs["atari-10pct"].algorithm.cql_weight == 1.0


DISCRETE_PRESETS = {"qrdqn": "atari_qrdqn", "discrete_cql": "atari_cql"}


@pytest.mark.parametrize("folder", sorted(DISCRETE_PRESETS))
def test_the_cartpole_presets_load_with_exactly_the_values_in_their_files(folder: str) -> None:
    import importlib

    app = importlib.import_module(f"offline_rl.cli.{DISCRETE_PRESETS[folder]}")
    path = REPO_ROOT / "configs" / folder / "CartPole-v1.yaml"
    values = field_values(app.config_from_args(["--config", str(path)]))
    for key, expected in load_preset(path).items():
        assert values[key] == (pytest.approx(expected) if isinstance(expected, float) else expected), key


def test_the_presets_hold_corls_values() -> None:
    for name in LOCOMOTION:
        algo = d4rl_cql.config_from_args(["--config", str(REPO_ROOT / "configs/cql" / f"{name}.yaml")]).algorithm
        assert (algo.actor_lr, algo.entropy_lr, algo.critic_lr, algo.alpha) == (3e-5, 3e-5, 3e-4, 1.0)
        assert algo.actor_hidden_sizes == [256] * 3 and algo.log_std_offset == -1.0 and algo.critic_layers == 3
        assert algo.cql_weight == 10.0 and not algo.with_lagrange and algo.normalize_obs
        assert algo.normalize_reward == (name == "hopper-medium-v2")  # CORL turns it on there only
    for name in ANTMAZE:
        config = d4rl_cql.config_from_args(["--config", str(REPO_ROOT / "configs/cql" / f"{name}.yaml")])
        algo = config.algorithm
        assert algo.cql_weight == 5.0 and algo.clip_diff_min == -200.0 and not algo.normalize_obs
        assert algo.critic_layers == 5 and algo.with_lagrange and algo.target_action_gap == 0.8
        assert algo.max_target_backup and (algo.reward_scale, algo.reward_bias) == (10.0, -5.0)
        assert algo.lagrange_multiplier_init == pytest.approx(math.e) and algo.actor_lr == 1e-4
        assert config.run.test_num == 100 and config.run.step_per_epoch == 50_000
    for name in ADROIT:  # CORL: cql_alpha 1 and policy_lr 1e-4 for every Adroit dataset, D4RL's own rewards
        config = d4rl_cql.config_from_args(["--config", str(REPO_ROOT / "configs/cql" / f"{name}.yaml")])
        algo = config.algorithm
        assert config.task is None and config.dataset == name  # the dataset's env: D4RL/<task>-v1
        assert (algo.actor_lr, algo.entropy_lr, algo.critic_lr, algo.alpha) == (1e-4, 1e-4, 3e-4, 1.0)
        assert algo.cql_weight == 1.0 and not algo.with_lagrange and algo.normalize_obs and algo.critic_layers == 3
        assert not algo.normalize_reward and (algo.reward_scale, algo.reward_bias) == (1.0, 0.0)
        assert config.run.test_num == 10 and config.run.epoch * config.run.step_per_epoch == 1_000_000
    for name in MAZE2D:  # CORL: cql_alpha 10 with Lagrange towards a gap of 5, policy_lr 3e-5, 100 episodes
        config = d4rl_cql.config_from_args(["--config", str(REPO_ROOT / "configs/cql" / f"{name}.yaml")])
        algo = config.algorithm
        assert config.task is None and config.dataset == name and config.run.test_num == 100
        assert (algo.actor_lr, algo.entropy_lr, algo.critic_lr, algo.lagrange_lr) == (3e-5, 3e-5, 3e-4, 3e-4)
        assert algo.cql_weight == 10.0 and algo.with_lagrange and algo.target_action_gap == 5.0
        assert algo.lagrange_multiplier_init == pytest.approx(math.e) and algo.normalize_obs
        assert not algo.normalize_reward and (algo.reward_scale, algo.reward_bias) == (1.0, 0.0)


def readme_preset_rows() -> list[tuple[list[str], list[str]]]:
    """(preset names, flags) of each row of the CQL-SAC page's preset-file table."""
    text = (REPO_ROOT / "docs" / "pages" / "algorithms" / "cql-sac.md").read_text(encoding="utf-8")
    section = text[text.index("## Preset files") :]
    section = section[: section.index("\n#", 1)]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[1].startswith("`--"):
            rows.append((re.findall(r"`([a-z0-9-]+-v[12])`", cells[0]), shlex.split(cells[1].strip("`"))))
    return rows


def test_the_readme_table_says_exactly_what_each_preset_sets() -> None:
    rows = readme_preset_rows()
    described = [name for names, _ in rows for name in names]
    assert sorted(described) == sorted(LOCOMOTION + ANTMAZE + ADROIT + MAZE2D)
    for names, flags in rows:
        from_flags = d4rl_cql.config_from_args(flags)
        for name in names:
            path = REPO_ROOT / "configs/cql" / f"{name}.yaml"
            from_file = d4rl_cql.config_from_args(["--config", str(path)])
            from_file = dataclasses.replace(from_file, task=from_flags.task, dataset=from_flags.dataset)
            assert from_file == from_flags, name
            # and the flags name every key the file sets (besides the task and dataset)
            keys = {key.replace("-", "_") for key in load_preset(path)} - {"task", "dataset"}
            spelled = {
                flag[2:].replace("-", "_").split("=")[0].removeprefix("no_") for flag in flags if flag.startswith("--")
            }
            assert keys <= spelled, (name, keys - spelled)


def test_flags_given_on_the_command_line_override_a_preset() -> None:
    path = REPO_ROOT / "configs/cql/antmaze-umaze-v2.yaml"
    config = d4rl_cql.config_from_args(["--config", str(path), "--cql-weight", "3", "--no-with-lagrange"])
    assert config.algorithm.cql_weight == 3.0 and not config.algorithm.with_lagrange
    assert config.algorithm.critic_layers == 5  # the rest stays the file's


@pytest.mark.parametrize(
    ("name", "datasets"),
    [
        ("cql-halfcheetah-corl", 3),
        ("cql-adroit-corl", 12),
        ("cql-maze2d-corl", 6),
        ("cql-antmaze-corl", 6),
        ("cql-gym-mujoco-corl", 9),
    ],
)
def test_a_corl_table_sweep_runs_each_dataset_with_its_own_preset(
    name: str, datasets: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table sweeps name one preset and grid the dataset, or grid the presets: every trial must be
    exactly the run its dataset's own preset makes, evaluated on the dataset's env."""
    from offline_rl.sweep.spec import load_spec

    monkeypatch.chdir(REPO_ROOT)  # the sweep files name their preset relative to the repository
    trials = load_spec(REPO_ROOT / "configs" / "sweeps" / f"{name}.yaml").trials()
    settings = {trial.id: d4rl_cql.config_from_args(list(trial.arguments)) for trial in trials}
    names = {config.dataset for config in settings.values()}
    assert len(trials) == 4 * len(names) and len(names) == datasets
    for trial in trials:
        seed = dict(trial.values)["seed"]
        dataset = settings[trial.id].dataset
        own = ["--config", str(REPO_ROOT / "configs/cql" / f"{dataset}.yaml"), "--seed", str(seed)]
        assert settings[trial.id] == d4rl_cql.config_from_args(own), trial.id


def test_the_cql_papers_gym_table_runs_the_authors_settings_on_its_v0_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    from offline_rl.sweep.spec import load_spec

    monkeypatch.chdir(REPO_ROOT)
    trials = load_spec(REPO_ROOT / "configs" / "sweeps" / "cql-mujoco-authors.yaml").trials()
    kinds = ("random", "medium", "expert", "medium-expert", "medium-replay")
    expected = {f"{env}-{kind}-v0" for env in ("halfcheetah", "hopper", "walker2d") for kind in kinds}
    assert {dict(trial.values)["dataset"] for trial in trials} == expected and len(trials) == 4 * len(expected)
    authors = REPO_ROOT / "configs" / "cql_authors" / "mujoco.yaml"
    for trial in trials:
        values = dict(trial.values)
        own = ["--config", str(authors), "--dataset", values["dataset"], "--seed", str(values["seed"])]
        settings = d4rl_cql.config_from_args(list(trial.arguments))
        assert settings == d4rl_cql.config_from_args(own) and not settings.task  # evaluated on its data's env


def test_the_gym_mujoco_table_keeps_hoppers_reward_normalisation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why its presets are a grid axis: one preset with a dataset axis would give hopper-medium the
    others' rewards (or them hopper-medium's)."""
    from offline_rl.sweep.spec import load_spec

    monkeypatch.chdir(REPO_ROOT)
    trials = load_spec(REPO_ROOT / "configs" / "sweeps" / "cql-gym-mujoco-corl.yaml").trials()
    normalised = {
        d4rl_cql.config_from_args(list(trial.arguments)).dataset
        for trial in trials
        if d4rl_cql.config_from_args(list(trial.arguments)).algorithm.normalize_reward
    }
    assert normalised == {"hopper-medium-v2"}
    assert trials[0].id == "config=halfcheetah-medium-v2__seed=0"


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "configs" / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_sweep_expands_to_trials_its_example_accepts(path, monkeypatch: pytest.MonkeyPatch) -> None:
    from offline_rl.sweep.spec import load_spec

    monkeypatch.chdir(REPO_ROOT)
    spec = load_spec(path)
    trials = spec.trials()  # each trial's flags parsed by the example
    assert spec.name == path.stem and len({trial.id for trial in trials}) == len(trials) >= 4


def shipped_presets() -> dict[Path, str]:
    """Every preset file under configs/ (sweep files aside), with the program it is written for."""
    owners = {
        "cql": "d4rl_cql",
        "td3_bc": "d4rl_td3_bc",
        "bc": "d4rl_bc",
        "bc_10": "d4rl_bc",
        "rebrac": "d4rl_rebrac",
        "iql": "d4rl_iql",
        "discrete_cql": "atari_cql",
        "qrdqn": "atari_qrdqn",
        "sac": "mujoco_sac",
    }
    found = {
        path: owners[path.parent.name]
        for path in (REPO_ROOT / "configs").glob("*/*.yaml")
        if path.parent.name in owners
    }
    for path in (REPO_ROOT / "configs" / "cql_authors").glob("*.yaml"):
        found[path] = "atari_cql" if path.stem.startswith("atari") else "d4rl_cql"
    return found


@pytest.mark.parametrize(
    "other", ["d4rl_cql", "d4rl_td3_bc", "d4rl_bc", "d4rl_iql", "d4rl_rebrac", "atari_cql", "atari_qrdqn", "mujoco_sac"]
)
def test_a_preset_given_to_another_program_names_the_program_it_is_for(other: str) -> None:
    """An Atari preset given to d4rl_cql.py said "unknown setting 'eval_env'", as if the file had a typo;
    now the error names the program whose settings the file holds, and the command that takes it."""
    import importlib

    from offline_rl.cli.programs import PROGRAMS
    from offline_rl.core.errors import OfflineRLError

    presets = shipped_presets()
    assert len(presets) >= 48 and set(presets.values()) == set(PROGRAMS)
    parse = importlib.import_module(PROGRAMS[other].module).config_from_args
    refused = 0
    for path, owner in presets.items():
        if owner == other:
            parse(["--config", str(path)])  # its own program takes it
            continue
        try:
            parse(["--config", str(path)])
        except OfflineRLError as error:
            expected = f"--config {path}: a preset for {PROGRAMS[owner].command} ("
            assert str(error).startswith(expected), str(error)
            assert str(error).endswith(f"; python {PROGRAMS[owner].command} --config {path}")
            assert f"no settings of {PROGRAMS[other].command})" in str(error)
            refused += 1
    assert refused > 0


def test_a_preset_with_a_typo_is_still_an_unknown_setting_and_a_sweep_names_the_program(tmp_path: Path) -> None:
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.sweep.spec import example_defaults

    typo = tmp_path / "typo.yaml"
    typo.write_text("cql_weigth: 5\n")
    with pytest.raises(
        OfflineRLError, match=r"typo.yaml: unknown setting 'cql_weigth'; cql_weigth: did you mean --cql-weight\?$"
    ):
        d4rl_cql.config_from_args(["--config", str(typo)])
    atari = REPO_ROOT / "configs" / "cql_authors" / "atari-1pct.yaml"
    with pytest.raises(
        OfflineRLError,
        match=r"a preset for examples/atari_cql.py \(.*: no settings of examples/d4rl_cql.py\); python examples/atari",
    ):
        example_defaults("d4rl_cql", str(atari), "sweep.yaml")
