"""What a sweep is: an example, fixed flags, grid axes; and the trials they expand to.

A sweep file is YAML:

    name: pendulum-cql-weight        # the folder under --logdir (default: the file's name)
    example: d4rl_cql                # or d4rl_iql, d4rl_td3_bc, d4rl_rebrac, d4rl_bc, atari_cql
    config: configs/cql/hopper-medium-v2.yaml   # optional: the example's own --config preset
    set: {task: Pendulum-v1, epoch: 3}          # flags every trial gets
    grid: {seed: [0, 1, 2], cql_weight: [1, 5]} # one trial per combination

Keys are any spelling of an example's flag. Everything is checked against the example's settings
before a trial starts: a bad sweep costs one line, not a half-run grid.

`config` may also be a grid axis, a list of presets, one per trial: a published table whose datasets
each have their own preset (CORL's Gym-MuJoCo table: hopper-medium's rewards are normalised, the
other eight datasets' are not) is then one file, each trial exactly its dataset's own run.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from offline_rl.cli.presets import (
    apply_preset,
    as_arguments,
    coerce_setting,
    setting_named,
    text_of,
    unique_key_loader,
)
from offline_rl.cli.programs import PROGRAMS
from offline_rl.core.errors import OfflineRLError

EXAMPLES = {
    name: PROGRAMS[name] for name in ("d4rl_cql", "d4rl_iql", "d4rl_td3_bc", "d4rl_rebrac", "d4rl_bc", "atari_cql")
}
"""The examples a sweep runs, by name (the offline ones: a trial is a run folder with a last evaluation)."""
# Set by the sweep itself for every trial (its own folder), or meaningless in a grid; with what to do instead.
RESERVED = {
    "logdir": "",
    "resume_path": "",
    "watch": "",
    "export_policy": "",
    "render": "",
    "config": "",
    "fqe_updates": " (the sweep's own --fqe-updates estimates every trial's final policy)",
    "fqe_output": "",
    "num_seeds": " (the sweep trains trials that differ only in their seed as one batch itself)",
}
_KEYS = {"name", "example", "config", "set", "grid"}
CONFIG_AXIS = "config"
"""The grid axis of preset files (the example's --config), one per trial; not a setting of the example."""
_PRESET_SUFFIXES = (".yaml", ".yml")
COMMAND_LINE = "the command line"
"""The source of a sweep given by flags alone (--example, --grid, --set, --example-config)."""


@dataclass(frozen=True)
class Trial:
    """One run of the example: its id (its folder's name) and the flags that make it."""

    id: str
    arguments: tuple[str, ...]
    values: tuple[tuple[str, Any], ...]  # the grid values, by setting name
    alone: bool = False  # trains in a process of its own, never in a batch of seeds (it fine-tunes online)


@dataclass
class SweepSpec:
    name: str
    example: str
    fixed: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    config: str | None = None
    source: str = COMMAND_LINE

    def trials(self) -> list[Trial]:
        """Every combination of the grid's values, each checked by the example's own parser."""
        default = example_defaults(self.example, self.config, self.source)
        fixed = _resolved(default, self.fixed, f"{self.source}: set")
        axes = [(key, self._axis(default, key, values)) for key, values in self.grid.items()]
        fixed_arguments = [argument for _, arguments in fixed.values() for argument in arguments]
        if self.config:
            fixed_arguments = ["--config", self.config, *fixed_arguments]
        trials = []
        # each axis's values, with the folder-name piece of each
        named_axes = [
            (name, list(zip(values, _slugs([value for value, _ in values], name), strict=True)))
            for name, values in axes
        ]
        for combination in itertools.product(*(values for _, values in named_axes)):
            chosen = [
                (name, value, arguments, slug)
                for (name, _), ((value, arguments), slug) in zip(named_axes, combination, strict=True)
            ]
            trial_id = "__".join(f"{name}={slug}" for name, _, _, slug in chosen)
            arguments = [*fixed_arguments, *(a for _, _, args, _ in chosen for a in args)]
            trials.append(Trial(trial_id, tuple(arguments), tuple((name, value) for name, value, _, _ in chosen)))
        parsed = check_with_example(self.example, trials, self.source)
        trials = [
            dataclasses.replace(
                trial,
                arguments=(*trial.arguments, *self._wandb_naming(settings, trial.id)),
                alone=fine_tunes(settings),
            )
            for trial, settings in zip(trials, parsed, strict=True)
        ]
        if len({trial.id for trial in trials}) < len(trials):
            raise OfflineRLError(f"{self.source}: two trials would share a folder name; give the grid distinct values")
        return trials

    def _axis(self, default: Any, key: str, values: list[Any]) -> list[tuple[Any, list[str]]]:
        """A grid axis's values, each with the flags that give it."""
        if key == CONFIG_AXIS:
            return _preset_axis(self, values)
        return _resolved_axis(default, key, values, self.source)

    def _wandb_naming(self, settings: Any, trial_id: str) -> list[str]:
        """For a trial that logs to W&B (`--logger wandb`): the sweep's name as its W&B group and its id as
        its W&B run name, unless the sweep names them itself."""
        logging = settings.run.logging  # every example's RunConfig holds one LoggingConfig
        if logging.logger != "wandb":
            return []
        group = ["--wandb-group", self.name] if logging.wandb_group is None else []
        return group + (["--wandb-name", trial_id] if logging.wandb_name is None else [])


def fine_tunes(settings: Any) -> bool:
    """Whether a trial fine-tunes online after its offline epochs (`--online-steps`), which plays one env
    per run: its seeds train apart."""
    finetune = getattr(settings, "finetune", None)
    return finetune is not None and finetune.fine_tunes


def example_defaults(example: str, config: str | None, source: str) -> Any:
    """The example's settings dataclass, with its preset file applied."""
    if example not in EXAMPLES:
        raise OfflineRLError(f"{source}: unknown example '{example}'; expected one of {', '.join(EXAMPLES)}")
    settings = EXAMPLES[example].default_settings()
    if config:
        try:
            settings = apply_preset(settings, config, prog=EXAMPLES[example].command)
        except OfflineRLError as error:
            if source == COMMAND_LINE:  # --example-config: the line names the file already
                raise
            raise OfflineRLError(f"{source}: {error}") from None  # the sweep file that named the preset
    return settings


def check_with_example(example: str, trials: list[Trial], source: str) -> list[Any]:
    """Parse every trial's flags as the example will: ranges and combinations fail here, before any run.
    Returns each trial's settings."""

    parse = importlib.import_module(EXAMPLES[example].module).config_from_args
    parsed = []
    for trial in trials:
        try:
            parsed.append(parse(list(trial.arguments)))
        except OfflineRLError as error:
            raise OfflineRLError(f"{source}: trial {trial.id}: {error}") from None
        except SystemExit:
            raise OfflineRLError(
                f"trial {trial.id}: the example refuses its flags: {' '.join(trial.arguments)}"
            ) from None
    return parsed


def _resolved(default: Any, values: dict[str, Any], source: str) -> dict[str, tuple[Any, list[str]]]:
    """Each key's setting name, its value as the setting's type, and the arguments that give it."""

    resolved: dict[str, tuple[Any, list[str]]] = {}
    for key, value in values.items():
        _, setting, owner = setting_named(default, key, source=source)
        if setting.name in RESERVED:
            raise OfflineRLError(f"{source}: '{key}' is set by the sweep itself; remove it{RESERVED[setting.name]}")
        if setting.name in resolved:
            raise OfflineRLError(f"{source}: '{key}' names the setting {setting.name} a second time")
        coerced = coerce_setting(owner, setting, value, f"{source}: {key}")
        resolved[setting.name] = (coerced, as_arguments(setting, coerced))
    return resolved


def _resolved_axis(default: Any, key: str, values: list[Any], source: str) -> list[tuple[Any, list[str]]]:
    _, setting, owner = setting_named(default, key, source=f"{source}: grid")
    if setting.name in RESERVED:
        instead = RESERVED[setting.name]
        raise OfflineRLError(f"{source}: grid axis '{key}' is set by the sweep itself; remove it{instead}")
    if not values:
        raise OfflineRLError(f"{source}: grid axis '{key}' has no values")
    coerced = [coerce_setting(owner, setting, value, f"{source}: grid {key}") for value in values]
    if len({repr(value) for value in coerced}) < len(coerced):
        raise OfflineRLError(f"{source}: grid axis '{key}' repeats a value")
    return [(value, as_arguments(setting, value)) for value in coerced]


def _preset_axis(spec: SweepSpec, presets: list[Any]) -> list[tuple[Any, list[str]]]:
    """The `config` axis: each preset read and checked for the example (a missing file, a preset of
    another program or an unknown key is one line naming it), given to its trials as `--config`."""
    if spec.config:
        raise OfflineRLError(
            f"{spec.source}: config is both the top-level preset and a grid axis; give one preset for every "
            "trial (config: FILE) or one per trial (grid: config: [FILE, ...])"
        )
    if not presets:
        raise OfflineRLError(f"{spec.source}: grid axis 'config' has no values")
    files = [str(preset) for preset in presets]
    if len(set(files)) < len(files):
        raise OfflineRLError(f"{spec.source}: grid axis 'config' repeats a value")
    for file in files:
        example_defaults(spec.example, file, f"{spec.source}: grid config")
    return [(file, ["--config", file]) for file in files]


def check_name(name: str, source: str) -> None:
    """A sweep lives in LOGDIR/NAME: one folder name, so that it never writes outside --logdir nor reads
    another sweep's runs into its table."""
    if not name.strip() or name in (".", "..") or any(mark in name for mark in ("/", "\\", "\0")):
        label = source if source.startswith("--") else f"{source}: name"
        raise OfflineRLError(f"{label} {name!r}: expected one folder name (no '/', not '.' or '..')")


def _slug(value: Any, depth: int = 1) -> str:
    """A value as a piece of a folder name; of a path, its last `depth` parts. A number keeps its sign:
    `reward_bias=-1.0` and `reward_bias=1.0` are two trials."""
    text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
    if "/" in text:
        text = "-".join(Path(text).parts[-depth:])
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).rstrip("-")
    return (slug if text.startswith("-") else slug.lstrip("-")) or "none"


def _slugs(values: list[Any], axis: str = "") -> list[str]:
    """An axis's values as folder-name pieces: of paths, their file names where those tell them apart,
    else as many of their last parts as do (every game's DQN Replay files are named alike, so
    `.../Pong/1/ckpt_*-first_0.01.hdf5` becomes `Pong-1-ckpt_-first_0.01.hdf5`); presets without
    their `.yaml` (`config=hopper-medium-v2`)."""
    if axis == CONFIG_AXIS:
        values = [_without_suffix(str(value)) for value in values]
    deepest = max(len(Path(str(value)).parts) for value in values)
    for depth in range(1, deepest + 1):
        slugs = [_slug(value, depth) for value in values]
        if len(set(slugs)) == len(slugs):
            return slugs
    return [_slug(value, deepest) for value in values]


def _without_suffix(path: str) -> str:
    return next((path.removesuffix(suffix) for suffix in _PRESET_SUFFIXES if path.endswith(suffix)), path)


def check_axes(spec: SweepSpec) -> None:
    """Errors that need no example: an empty grid, a setting both fixed and swept, a repeated axis
    (two spellings of one setting)."""
    if not spec.grid:
        raise OfflineRLError(f"{spec.source}: the grid is empty; give at least one axis (--grid seed=0,1,2)")
    default = example_defaults(spec.example, spec.config, spec.source)

    names: dict[str, str] = {}
    for key in spec.grid:
        if key == CONFIG_AXIS:
            continue
        name = setting_named(default, key, source=f"{spec.source}: grid")[1].name
        if name in names:
            raise OfflineRLError(f"{spec.source}: grid axes '{names[name]}' and '{key}' are the same setting")
        names[name] = key
    for key in spec.fixed:
        name = setting_named(default, key, source=f"{spec.source}: set")[1].name
        if name in names:
            raise OfflineRLError(f"{spec.source}: '{key}' is both fixed (set) and a grid axis")


def load_spec(path: str | Path) -> SweepSpec:
    """A sweep file, with one-line errors naming the file and what is wrong."""

    file = Path(path).expanduser()
    source = str(file)
    if not file.exists():
        raise OfflineRLError(f"{source}: no such sweep file")
    try:
        data = yaml.load(text_of(file, source, "a sweep file (YAML)"), Loader=unique_key_loader())
    except yaml.YAMLError as error:
        raise OfflineRLError(f"{source}: not a valid sweep file ({' '.join(str(error).split())})") from None
    if not isinstance(data, dict):
        keys = "example, and any of name, config, set and grid"
        raise OfflineRLError(f"{source}: expected a mapping of {keys}, got {_yaml_kind(data)}")
    unknown = sorted(set(map(str, data)) - _KEYS)
    if unknown:
        raise OfflineRLError(f"{source}: unknown key '{unknown[0]}'; expected {', '.join(sorted(_KEYS))}")
    if "example" not in data:
        raise OfflineRLError(f"{source}: no 'example' (one of {', '.join(EXAMPLES)})")
    fixed, grid = data.get("set") or {}, data.get("grid") or {}
    if not isinstance(fixed, dict) or not isinstance(grid, dict):
        raise OfflineRLError(f"{source}: 'set' and 'grid' must be mappings of flag names")
    return SweepSpec(
        name=str(data.get("name") or file.stem),
        example=str(data["example"]),
        fixed=dict(fixed),
        grid={str(k): (list(v) if isinstance(v, list) else [v]) for k, v in grid.items()},
        config=str(data["config"]) if data.get("config") else None,
        source=source,
    )


def _yaml_kind(data: Any) -> str:
    """What a YAML document holds, in YAML's words (a list, a string), for one-line errors."""
    if data is None:
        return "an empty file"
    kinds = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return kinds.get(type(data), type(data).__name__)


def parse_assignments(items: Sequence[str], flag: str, *, lists: bool) -> dict[str, Any]:
    """`KEY=VALUE` flags: `--set epoch=3`, `--grid seed=0,1,2` (comma-separated values)."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise OfflineRLError(f"{flag} {item}: expected KEY=VALUE")
        if key in parsed:
            raise OfflineRLError(f"{flag} {key}: given twice")
        parsed[key] = [v for v in value.split(",") if v != ""] if lists else value
    return parsed


def with_overrides(spec: SweepSpec, fixed: dict[str, Any], grid: dict[str, list[Any]]) -> SweepSpec:
    """The command line's --set and --grid on top of a sweep file's (a flag's axis replaces the file's)."""
    return dataclasses.replace(spec, fixed={**spec.fixed, **fixed}, grid={**spec.grid, **grid})
