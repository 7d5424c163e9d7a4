"""Flags come from the config dataclasses: every documented command line parses, every old spelling
still works, `--help` describes every flag with its default, and preset files merge with flags."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO_ROOT, run_repo_script
from offline_rl.algorithms.cql_sac import CQLSACConfig
from offline_rl.algorithms.discrete_cql import DiscreteCQLConfig
from offline_rl.cli import atari_cql, atari_qrdqn, d4rl_bc, d4rl_cql, d4rl_iql, d4rl_rebrac, d4rl_td3_bc, mujoco_sac
from offline_rl.cli.convert_buffers import (
    ConversionConfig,
    DownloadableConversionConfig,
    conversion_config_from_args,
)
from offline_rl.cli.convert_dqn_replay import DQNReplayConversionConfig
from offline_rl.cli.convert_dqn_replay import config_from_args as dqn_replay_config_from_args
from offline_rl.cli.convert_rl_unplugged import RLUnpluggedConversionConfig
from offline_rl.cli.convert_rl_unplugged import config_from_args as rl_unplugged_config_from_args
from offline_rl.cli.describe import DescribeConfig
from offline_rl.cli.flags import build_parser, parse_config
from offline_rl.collect import config_from_args as collect_config_from_args
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.settings import flag_of, from_dict, leaf_fields
from offline_rl.results.command import ResultsConfig
from offline_rl.sweep.command import SweepConfig

PARSERS: dict[str, Callable[[list[str]], Any]] = {
    "examples/d4rl_cql.py": d4rl_cql.config_from_args,
    "examples/d4rl_td3_bc.py": d4rl_td3_bc.config_from_args,
    "examples/d4rl_bc.py": d4rl_bc.config_from_args,
    "examples/d4rl_rebrac.py": d4rl_rebrac.config_from_args,
    "examples/d4rl_iql.py": d4rl_iql.config_from_args,
    "examples/atari_cql.py": atari_cql.config_from_args,
    "examples/atari_qrdqn.py": atari_qrdqn.config_from_args,
    "examples/mujoco_sac.py": mujoco_sac.config_from_args,
    "-m offline_rl.collect": collect_config_from_args,
    "converters/d4rl.py": lambda argv: conversion_config_from_args(
        ConversionConfig(), argv, prog="converters/d4rl.py", source_help="a dataset"
    ),
    "converters/minari.py": lambda argv: conversion_config_from_args(
        DownloadableConversionConfig(), argv, prog="converters/minari.py", source_help="a dataset"
    ),
    "converters/rl_unplugged_atari.py": rl_unplugged_config_from_args,
    "converters/dqn_replay_atari.py": dqn_replay_config_from_args,
    "-m offline_rl.sweep": lambda argv: parse_config(SweepConfig(), argv, prog="sweep", description=""),
    "-m offline_rl.results": lambda argv: parse_config(ResultsConfig(), argv, prog="results", description=""),
    "-m offline_rl.describe": lambda argv: parse_config(DescribeConfig(), argv, prog="describe", description=""),
}

DOCUMENTED_IN = [
    "README.md",
    *sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "docs" / "pages").rglob("*.md")),
    "examples/d4rl_cql.py",
    "examples/d4rl_td3_bc.py",
    "examples/d4rl_bc.py",
    "examples/d4rl_iql.py",
    "examples/atari_cql.py",
    "examples/atari_qrdqn.py",
    "converters/d4rl.py",
    "converters/minari.py",
    "converters/rl_unplugged_atari.py",
    "converters/dqn_replay_atari.py",
]


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(file, script, arguments) of every `python <script> ...` line in the docs, continuations joined."""
    found = []
    for name in DOCUMENTED_IN:
        text = re.sub(r"\\+\n", " ", (REPO_ROOT / name).read_text(encoding="utf-8"))
        # commands at the start of a line (code blocks, docstrings) or chained after `&&`; not prose
        programs = r"-m offline_rl\.(?:collect|describe|sweep|results)|(?:examples|converters)/\w+\.py"
        pattern = rf"(?:^[ \t]*|&& )python3? ({programs})([^\n`]*)"
        for match in re.finditer(pattern, text, flags=re.MULTILINE):
            script, rest = match.group(1), match.group(2)
            rest = rest.split(" # ")[0].split("&&")[0]
            rest = re.sub(r"\[(--[^\]]+)\]", r"\1", rest)  # "[--task X]": an optional part, shown in brackets
            if "..." in rest or "[" in rest:  # a pattern such as `--load-buffer-name A.hdf5 B.hdf5 ...`
                rest = rest.replace("...", "").replace("[", "").replace("]", "")
            found.append((name, script, shlex.split(rest.replace("<", "").replace(">", ""))))
    return found


COMMANDS = documented_commands()


def test_the_docs_document_commands_for_every_entry_point() -> None:
    assert len(COMMANDS) >= 20
    assert {script for _name, script, _args in COMMANDS} == set(PARSERS)


@pytest.mark.parametrize(
    ("source", "script", "args"), COMMANDS, ids=[f"{n}:{' '.join(a)[:50]}" for n, _, a in COMMANDS]
)
def test_every_documented_command_line_parses(
    source: str, script: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the documented checkpoints (log/.../<stamp>/checkpoint.pth) do not exist here: parse as a
    # resume of a run that saved no settings
    monkeypatch.setattr("offline_rl.runs.checkpoint.load_checkpoint", lambda path, device="cpu": {})
    PARSERS[script](args)


def test_old_and_other_projects_spellings_still_work() -> None:
    config = d4rl_cql.config_from_args(
        [
            "--min_q_weight", "5", "--no-norm-obs", "--cql-alpha-lr", "0.01", "--update-per-epoch", "7",
            "--hidden_sizes", "64", "32", "--max-target-backup", "false", "--with_lagrange", "--no_auto_alpha",
        ]
    )  # fmt: skip
    algo = config.algorithm
    assert (algo.cql_weight, algo.normalize_obs, algo.lagrange_lr) == (5.0, False, 0.01)
    assert config.run.step_per_epoch == 7 and algo.actor_hidden_sizes == [64, 32]
    assert algo.max_target_backup is False and algo.with_lagrange is True and algo.auto_alpha is False
    discrete = atari_cql.config_from_args(["--min-q-weight", "50", "--load-buffer-name", "a.hdf5", "b.hdf5"])
    assert discrete.algorithm.cql_weight == 50.0 and discrete.load_buffer_name == ("a.hdf5", "b.hdf5")
    assert atari_qrdqn.config_from_args(["--watch"]).run.watch is True


@pytest.mark.parametrize(
    "default",
    [
        d4rl_cql.D4RLCQLConfig(),
        atari_cql.AtariCQLConfig(),
        atari_qrdqn.AtariQRDQNConfig(),
        DownloadableConversionConfig(),
        RLUnpluggedConversionConfig(),
        DQNReplayConversionConfig(),
        DescribeConfig(),
    ],
    ids=lambda config: type(config).__name__,
)
def test_help_gives_every_flag_a_description_and_its_default(default: Any) -> None:
    parser = build_parser(default, prog="x", description="x")
    for action in parser._actions:
        if action.dest in ("help", "config"):
            continue
        assert action.help and len(action.help.split("(")[0].strip()) > 3, action.option_strings
        assert "(default: " in action.help or "(required)" in action.help, action.option_strings
    text = parser.format_help()
    for _path, field, _owner in leaf_fields(default):
        main = field.name if field.metadata.get("positional") else flag_of(field)
        assert main in text  # every flag is listed ...
        assert "--" + main[2:].replace("-", "_") + " " not in text or "_" not in main  # ... once, in kebab-case


def test_help_runs_from_the_command_line(tmp_path: Path) -> None:
    result = run_repo_script("examples/atari_qrdqn.py", "--help", cwd=tmp_path, fresh=True)
    assert result.returncode == 0
    assert "--eps-test EPS_TEST" in result.stdout and "(default: 0.005)" in result.stdout


def test_preset_file_sets_defaults_and_flags_override_it(tmp_path: Path) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_text(
        "cql_weight: 5\nactor-lr: 3.0e-5\nhidden-sizes: [256, 256, 256]\ncritic_layers: 5\nnorm_obs: false\nepoch: 3\n"
    )
    config = d4rl_cql.config_from_args(["--config", str(preset), "--cql-weight", "7"])
    algo = config.algorithm
    assert algo.cql_weight == 7.0  # the flag wins
    assert algo.actor_lr == 3e-5 and algo.actor_hidden_sizes == [256, 256, 256]
    assert algo.critic_hidden_sizes == [256] * 5 and algo.normalize_obs is False and config.run.epoch == 3
    assert d4rl_cql.config_from_args([f"--config={preset}"]).algorithm.cql_weight == 5.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no_such_setting: 1\n", "unknown setting 'no_such_setting'"),
        ("cql_weight: lots\n", "cql_weight: 'lots' is not valid"),
        ("- a list\n", "expected a mapping"),
        ("cql_weight: [1\n", "not valid YAML"),
        ("tau: 0\n", "--tau 0.0: expected a value in (0, 1]"),
        # YAML's types held to the setting's, not converted into it (int() would make each of these 1)
        ("epoch: 1.5\n", "epoch: 1.5 is not valid (not a whole number)"),
        ("epoch: true\n", "epoch: True is not valid (true where a number is expected)"),
        ("seed: true\n", "seed: True is not valid (true where a number is expected)"),
        ("hidden_sizes: [64, 2.5]\n", "hidden_sizes: [64, 2.5] is not valid (not a whole number)"),
        ("reward_scale: false\n", "reward_scale: False is not valid (false where a number is expected)"),
        ("epoch: 2.0e+23\n", "epoch: 2e+23 is not valid (a float where a whole number is expected)"),
        ("epoch: 2000000\n", "--epoch 2000000: expected a value in [1, 1000000]"),
        ("epoch: 3\nseed: 1\nepoch: 4\n", "not valid YAML ('epoch' appears twice)"),  # YAML keeps the last
        (  # CORL's own config file: pointed to the preset that holds its settings in this toolkit's names
            "env: hopper-medium-v2\ncql_alpha: 10.0\npolicy_lr: 3.0e-5\nbatch_size: 256\n",
            "a CORL config (cql_alpha, env, policy_lr); CORL's CQL settings are here as presets, in this "
            "toolkit's names: --config configs/cql/hopper-medium-v2.yaml",
        ),
    ],
)
def test_bad_preset_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text(text)
    with pytest.raises(OfflineRLError, match=re.escape(message)):
        d4rl_cql.config_from_args(["--config", str(preset)])
    with pytest.raises(OfflineRLError, match="no such file"):
        d4rl_cql.config_from_args(["--config", str(tmp_path / "missing.yaml")])


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], True),
        (["--normalize-obs"], True),
        (["--no-normalize-obs"], False),
        (["--no_normalize_obs"], False),
        (["--normalize-obs", "false"], False),
        (["--normalize_obs", "No"], False),
        (["--normalize-obs", "off"], False),
        (["--normalize-obs", "0"], False),
        (["--no-normalize-obs", "--normalize-obs", "yes"], True),  # the last one given wins
        (["--normalize-obs", "ON"], True),
    ],
)
def test_a_boolean_setting_takes_every_spelling_of_yes_and_no(given: list[str], expected: bool) -> None:
    assert d4rl_cql.config_from_args(given).algorithm.normalize_obs is expected


def test_a_boolean_setting_given_a_word_it_does_not_know_is_one_line(tmp_path: Path) -> None:
    result = run_repo_script("examples/d4rl_cql.py", "--normalize-obs", "maybe", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("error: --normalize-obs: expected true/false, got 'maybe'")


def test_bad_flags_exit_2_with_one_line(tmp_path: Path) -> None:
    result = run_repo_script("examples/d4rl_cql.py", "--no-watch", "yes", cwd=tmp_path)
    assert result.returncode == 2 and "--no-watch takes no value" in result.stderr
    result = run_repo_script("examples/d4rl_cql.py", "--config", str(tmp_path / "none.yaml"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --config")
    result = run_repo_script("examples/atari_cql.py", "--num-quantiles", "1", cwd=tmp_path)
    assert result.returncode == 2 and "--num-quantiles 1: expected at least 2" in result.stderr


def test_a_flag_that_needs_a_file_given_last_without_one_is_one_line(tmp_path: Path) -> None:
    for flag, what in (("--config", "a YAML file"), ("--resume-path", "a checkpoint file")):
        result = run_repo_script("examples/d4rl_cql.py", "--epoch", "1", flag, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.strip() == f"error: {flag}: expected {what}"


def test_a_folder_given_as_a_preset_or_a_sweep_file_is_told_it_is_a_folder(tmp_path: Path) -> None:
    from offline_rl.sweep.spec import load_spec

    with pytest.raises(OfflineRLError, match=r"^--config .*: a folder; expected a YAML file$"):
        d4rl_cql.config_from_args(["--config", str(tmp_path)])
    with pytest.raises(OfflineRLError, match=r": a folder; expected a sweep file \(YAML\)$"):
        load_spec(tmp_path)


def test_a_preset_that_is_not_utf8_text_is_one_line(tmp_path: Path) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_bytes(b"task: Pendulum-v1\nepoch: \xff\n")
    with pytest.raises(OfflineRLError, match=r"^--config .*preset\.yaml: not UTF-8 text \(byte 0xff at position 25\)"):
        d4rl_cql.config_from_args(["--config", str(preset)])


def test_a_checkpoint_given_to_another_program_names_the_program_that_wrote_it(tmp_path: Path) -> None:
    """Each program's checkpoint holds its settings; another program cannot continue it, and says which can."""
    import torch

    from offline_rl.runs.checkpoint import save_checkpoint

    checkpoint = save_checkpoint(
        tmp_path / "policy.pth", torch.nn.Linear(1, 1), config=asdict(atari_qrdqn.AtariQRDQNConfig())
    )
    for program in (d4rl_cql, atari_cql):
        with pytest.raises(OfflineRLError, match=r"a checkpoint of examples/atari_qrdqn\.py; give it to that program"):
            program.config_from_args(["--resume-path", str(checkpoint)])
    save_checkpoint(checkpoint, torch.nn.Linear(1, 1), config={"unknown_setting": 1})  # no program's: the mismatch
    with pytest.raises(OfflineRLError, match=r"its saved settings do not fit this program \(unknown setting"):
        d4rl_cql.config_from_args(["--resume-path", str(checkpoint)])


# (program, the arguments it needs besides the one under test)
NUMERIC_FLAG_PROGRAMS: list[tuple[Callable[[list[str]], Any], list[str]]] = [
    (d4rl_cql.config_from_args, []),
    (atari_cql.config_from_args, []),
    (atari_qrdqn.config_from_args, []),
    (collect_config_from_args, ["--task", "Pendulum-v1", "--output", "p.hdf5"]),
    (lambda argv: parse_config(SweepConfig(), argv, prog="sweep", description=""), ["spec.yaml"]),
]


@pytest.mark.parametrize("program, required", NUMERIC_FLAG_PROGRAMS)
def test_every_float_flag_refuses_nan_and_infinity_unless_declared(
    program: Callable[[list[str]], Any], required: list[str]
) -> None:
    """A NaN (or inf) learning rate, reward scale or offset would poison every update silently."""
    default = program(required)
    floats = [field for _path, field, owner in leaf_fields(default) if isinstance(getattr(owner, field.name), float)]
    assert floats
    for field in floats:
        flag = flag_of(field)
        off = field.metadata.get("infinite")  # the infinity that switches a clip or a cap off
        allowed = f" or {off} \\(off\\)" if off is not None else ""
        with pytest.raises(OfflineRLError, match=rf"^{re.escape(flag)} nan: expected a finite number{allowed}$"):
            program([*required, flag, "nan"])
        for infinity in (math.inf, -math.inf):
            if infinity == off:
                program([*required, f"{flag}={infinity}"])
            else:  # --clip-diff-min inf would clip every gap to +inf
                with pytest.raises(
                    OfflineRLError, match=rf"^{re.escape(flag)} {infinity}: expected a finite number{allowed}$"
                ):
                    program([*required, f"{flag}={infinity}"])


def test_infinity_switches_off_a_clip_or_a_cap() -> None:
    config = d4rl_cql.config_from_args(["--clip-diff-max", "inf", "--lagrange-multiplier-max", "inf"])
    assert config.algorithm.clip_diff_max == math.inf and config.algorithm.lagrange_multiplier_max == math.inf


@pytest.mark.parametrize("program, required", [NUMERIC_FLAG_PROGRAMS[0], NUMERIC_FLAG_PROGRAMS[3]])
def test_seeds_are_the_32_bit_unsigned_integers_numpy_accepts(
    program: Callable[[list[str]], Any], required: list[str]
) -> None:
    assert program([*required, "--seed", str(2**32 - 1)])
    for seed in ("-1", str(2**32)):
        with pytest.raises(OfflineRLError, match=rf"^--seed {seed}: expected a value in \[0, 4294967295\]$"):
            program([*required, "--seed", seed])


def test_a_negative_seed_is_one_line_from_the_command_line(tmp_path: Path) -> None:
    result = run_repo_script("examples/d4rl_cql.py", "--seed", "-1", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: --seed -1: expected a value in [0, 4294967295]"


def test_booleans_before_a_positional_take_no_value() -> None:
    config = conversion_config_from_args(
        ConversionConfig(), ["--overwrite", "halfcheetah-medium-v2", "--output", "x.hdf5"], prog="x", source_help="x"
    )
    assert config.overwrite is True and config.source == "halfcheetah-medium-v2"


def test_a_flag_declared_twice_is_refused() -> None:
    from dataclasses import dataclass, field

    from offline_rl.core.settings import setting

    @dataclass
    class Clash:
        gamma: float = setting(0.9, "discount")
        algorithm: DiscreteCQLConfig = field(default_factory=DiscreteCQLConfig)

    with pytest.raises(ValueError, match="--gamma is declared twice"):
        parse_config(Clash(), [], prog="x", description="x")


def test_configs_saved_before_renames_still_load() -> None:
    old = {"actor_hidden_sizes": [64, 64], "critic_hidden_sizes": [128, 128, 128], "cql_alpha_lr": 0.01, "norm_obs": 0}
    config = from_dict(CQLSACConfig, old)
    assert config.critic_hidden_sizes == [128, 128, 128] and config.lagrange_lr == 0.01
    assert config.actor_hidden_sizes == [64, 64] and not config.normalize_obs
    assert from_dict(DiscreteCQLConfig, {"min_q_weight": 4.0}).cql_weight == 4.0
    with pytest.raises(OfflineRLError, match="unknown setting 'wobble'"):
        from_dict(DiscreteCQLConfig, {"wobble": 1})


def test_a_new_setting_is_a_flag_a_preset_key_and_a_checkpoint_entry(tmp_path: Path) -> None:
    """`log_std_offset` was added as one field of CQLSACConfig; everything else follows from it."""
    assert d4rl_cql.config_from_args(["--log-std-offset", "-1"]).algorithm.log_std_offset == -1.0
    preset = tmp_path / "corl.yaml"
    preset.write_text("log_std_offset: -1\n")
    config = d4rl_cql.config_from_args(["--config", str(preset)])
    assert config.algorithm.log_std_offset == -1.0
    from dataclasses import asdict

    assert from_dict(CQLSACConfig, asdict(config.algorithm)).log_std_offset == -1.0


def test_resuming_restores_the_runs_settings_except_this_commands_own(tmp_path: Path) -> None:
    import torch

    from offline_rl.runs.checkpoint import save_checkpoint

    original = d4rl_cql.config_from_args(
        ["--task", "Hopper-v4", "--dataset", "hopper-medium-v2", "--epoch", "7", "--cql-weight", "3", "--threads", "1"]
    )
    path = save_checkpoint(tmp_path / "checkpoint.pth", torch.nn.Linear(1, 1), epoch=3, config=asdict(original))
    resumed = d4rl_cql.config_from_args(["--resume-path", str(path), "--device", "cpu", "--epoch", "9"])
    assert (resumed.task, resumed.dataset, resumed.algorithm.cql_weight) == ("Hopper-v4", "hopper-medium-v2", 3.0)
    assert resumed.run.epoch == 9  # given here: overrides the run's 7
    assert resumed.run.torch.device == "cpu"  # this command's own setting
    assert resumed.run.torch.threads == 1  # the run's: its thread count fixes its float sums
    assert resumed.run.resume_path == str(path)


@pytest.mark.parametrize("script", list(PARSERS))  # every entry point
def test_help_and_flag_errors_load_neither_torch_nor_tianshou(script: str) -> None:
    """They answer in a tenth of a second, not after the seconds that torch and Tianshou take to import."""
    from conftest import modules_imported_by

    watched = ("torch", "tianshou", "tensorflow")
    assert modules_imported_by(script, ["--help"], ["--epoch", "none"], watched=watched) == []


PACKAGES = ["offline_rl", "offline_rl.data", "offline_rl.data.rl_unplugged", "offline_rl.data.dqn_replay"]


def test_packages_import_their_names_on_first_use_and_every_name_resolves() -> None:
    """Importing the packages costs nothing (what keeps `--help` instant); each exported name is then
    found in the module its package names for it (a misspelt entry would only fail when first used)."""
    import subprocess
    import sys

    from conftest import script_env

    program = (
        "import importlib, sys\n"
        f"packages = [importlib.import_module(name) for name in {PACKAGES!r}]\n"
        "print(sorted(name for name in ('torch', 'tianshou') if name in sys.modules))\n"
        "missing = [(p.__name__, n) for p in packages for n in p.__all__ if getattr(p, n, None) is None]\n"
        "print(missing)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=script_env())
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, missing = done.stdout.strip().splitlines()[-2:]
    assert (loaded, missing) == ("[]", "[]")


def test_a_lazily_imported_name_whose_module_fails_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """numpy 2 with TensorBoard 2.14 fails inside the import with an AttributeError (`np.string_`); through
    a package's `__getattr__` that read as "cannot import name 'FrameStackBufferBuilder'", naming no cause."""
    import sys

    from offline_rl.core.lazy import lazy_exports

    (tmp_path / "breaks_on_import.py").write_text("import numpy as np\nnp.string_is_gone\nclass Thing: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    package = type(sys)("fake_package")
    package.__getattr__, package.__dir__ = lazy_exports("fake_package", {"Thing": "breaks_on_import"})
    monkeypatch.setitem(sys.modules, "fake_package", package)
    with pytest.raises(ImportError, match=r"fake_package\.Thing: importing breaks_on_import failed: .*string_is_gone"):
        from fake_package import Thing  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'Other'"):  # a name it does not export stays one
        package.Other  # noqa: B018


def test_installed_commands_run_from_any_directory(tmp_path: Path) -> None:
    import importlib
    import re as regex
    import shutil
    import subprocess

    from conftest import script_env
    from offline_rl.cli import console

    setup_text = (REPO_ROOT / "setup.py").read_text()
    declared = regex.findall(r'"(offline-rl-[a-z0-9-]+) = offline_rl\.cli\.console:(\w+)"', setup_text)
    assert sorted(name for name, _ in declared) == sorted(console.COMMANDS)
    for name, function in declared:
        assert callable(getattr(console, function)) and shutil.which(name), f"{name}: pip install -e ."
        module, main = console.COMMANDS[name]
        assert callable(getattr(importlib.import_module(module), main))
    command = [shutil.which("offline-rl-d4rl-cql"), "--help"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=script_env())
    assert done.returncode == 0 and "--task" in done.stdout, done.stderr[-500:]


def test_a_list_saved_for_a_tuple_setting_reads_back_as_the_flag_gives_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint keeps `--load-buffer-name` as a list; read back as one, it differed from the
    tuple the flags give, so every atari_cql.py resume printed `--load-buffer-name cp.hdf5 overrides
    cp.hdf5 of the run`, a flag the user never gave."""
    from offline_rl.cli import atari_cql
    from offline_rl.cli.flags import _report_overrides

    restored = from_dict(atari_cql.AtariCQLConfig, {"load_buffer_name": ["cp.hdf5"]})
    assert restored.load_buffer_name == ("cp.hdf5",)
    _report_overrides(restored, atari_cql.config_from_args(["--load-buffer-name", "cp.hdf5"]), "checkpoint.pth")
    assert capsys.readouterr().out == ""


OTHER_TOOLKITS_FLAGS = [
    (
        d4rl_cql.config_from_args,
        ["--cql_alpha", "10"],
        "--cql_alpha is CORL's, TF-Agents' and jrl's cql_alpha: here --cql-weight",
    ),
    (d4rl_cql.config_from_args, ["--conservative-weight", "5"], "d3rlpy's conservative_weight: here --cql-weight"),
    (d4rl_cql.config_from_args, ["--lagrange-threshold", "10"], "here --target-action-gap; Tianshou thresholds w·gap"),
    (d4rl_cql.config_from_args, ["--normalize", "true"], "--normalize is CORL's normalize: here --normalize-obs"),
    (d4rl_cql.config_from_args, ["--max_timesteps", "9"], "the budget is --epoch × --step-per-epoch updates"),
    (d4rl_cql.config_from_args, ["--reward_shift", "-1"], "--reward-bias = reward_shift × reward_scale_factor"),
    (d4rl_cql.config_from_args, ["--log-cql-alpha-clipping", "-1"], "--lagrange-multiplier-min e^lo"),
    (d4rl_cql.config_from_args, ["--num_importance_acts", "10"], "jrl's num_importance_acts: here --cql-n-actions"),
    (d4rl_cql.config_from_args, ["--num_sgd_steps_per_step", "200"], "one replayed CUDA graph"),
    (d4rl_cql.config_from_args, ["--lagrange_thresh", "5"], "its value / --cql-weight with --with-lagrange"),
    (d4rl_cql.config_from_args, ["--min_q_version", "2"], "2 (CQL(ρ)): --no-importance-sample"),
    (d4rl_cql.config_from_args, ["--cql-wieght", "3"], "--cql-wieght: did you mean --cql-weight?"),
    (d4rl_cql.config_from_args, ["--epo", "3"], "--epo: did you mean --epoch?"),
    (atari_cql.config_from_args, ["--alpha", "4"], "--alpha is d3rlpy's DiscreteCQL alpha: here --cql-weight"),
]
PROG_OF = {d4rl_cql.config_from_args: "examples/d4rl_cql.py", atari_cql.config_from_args: "examples/atari_cql.py"}


@pytest.mark.parametrize(
    ("parse", "argv", "advice"), OTHER_TOOLKITS_FLAGS, ids=[a[0] for _, a, _ in OTHER_TOOLKITS_FLAGS]
)
def test_another_toolkits_flag_is_refused_naming_the_setting_it_stands_for(
    parse: Callable[[list[str]], Any], argv: list[str], advice: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, argparse took any unique prefix: CORL's `--cql_alpha 10` (its conservative weight) ran as
    `--cql_alpha_lr 10`, α′'s learning rate, and `--epo 3` as `--epoch 3`; names that were no prefix got
    "unrecognized arguments" and nothing else."""
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"{PROG_OF[parse]}: error: unrecognized arguments: {' '.join(argv)}; ") and advice in last


def test_another_toolkits_key_in_a_preset_names_the_setting(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("conservative_weight: 5\n", encoding="utf-8")
    with pytest.raises(OfflineRLError, match=r"unknown setting 'conservative_weight'; .*: here --cql-weight$"):
        d4rl_cql.config_from_args(["--config", str(preset)])


def test_every_other_toolkits_name_points_to_a_flag_that_exists_and_is_none_of_ours() -> None:
    from offline_rl.cli.foreign_flags import FOREIGN_NAMES

    parsers = [
        build_parser(config, prog="x", description="x")
        for config in (d4rl_cql.D4RLCQLConfig(), atari_cql.AtariCQLConfig())
    ]
    ours = set().union(*(parser.known_flags for parser in parsers))
    for entry in FOREIGN_NAMES:
        assert entry.flag is None or entry.flag in ours, entry
        assert entry.flag is not None or entry.note, entry
        for name in entry.names:
            spellings = {"--" + name, "--" + name.replace("_", "-")}
            taken_by = [parser for parser in parsers if spellings & parser.known_flags]
            # a name of ours in one program is only advice in the other (d3rlpy's discrete `alpha`)
            assert len(taken_by) < len(parsers), entry


@pytest.mark.parametrize(
    ("task", "flags", "warned"),
    [
        ("CartPole-v1", ["--frames-stack", "3"], "--frames-stack 3: applies to Atari games only; CartPole-v1"),
        ("Acrobot-v1", ["--eval-env", "NoFrameskip"], "--eval-env NoFrameskip: applies to Atari games only; Acrobot"),
        ("CartPole-v1", ["--frames-stack", "4", "--eval-env", "sticky"], None),  # the defaults: nothing chosen
        ("CartPole-v1", [], None),
        ("PongNoFrameskip-v4", ["--frames-stack", "3", "--eval-env", "NoFrameskip"], None),
    ],
)
def test_atari_only_settings_changed_for_a_vector_task_are_said_to_do_nothing(
    task: str, flags: list[str], warned: str | None
) -> None:
    import warnings

    from offline_rl.cli.task_choice import warn_atari_only_settings
    from offline_rl.core.errors import IgnoredFlagWarning

    config = atari_cql.config_from_args(["--task", task, *flags])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_atari_only_settings(task, config, ("frames_stack", "eval_env"))
    messages = [str(w.message) for w in caught if w.category is IgnoredFlagWarning]
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith(warned), messages


def test_a_negated_boolean_of_a_command_with_a_positional_takes_no_value_and_works() -> None:
    """Beside a positional (the sweep's file), booleans take no value; `--no-x` then switches x off (it was
    refused as if given a value)."""
    from offline_rl.cli.flags import parse_config
    from offline_rl.sweep.command import SweepConfig

    config = parse_config(
        SweepConfig(), ["--example", "d4rl_cql", "--no-seed-batches", "--no-mps"], prog="s", description=""
    )
    assert config.seed_batches is False and config.mps is False
    assert parse_config(SweepConfig(), ["--example", "d4rl_cql"], prog="s", description="").seed_batches is True
