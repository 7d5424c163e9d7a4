"""Command lines built from configuration dataclasses: one field, one flag.

`parse_config(default, argv, ...)` walks a (nested) config dataclass, adds one flag per field
(Tianshou's kebab-case spelling, the snake_case one, declared aliases, `--x/--no-x` for booleans,
space-separated lists), parses `argv`, and returns a validated copy of `default`. `--config FILE`
loads a YAML preset first: its values become the defaults, and flags given on the command line
override them. `--resume-path CHECKPOINT` does the same with the settings saved in the checkpoint
(dataset and budget included), so a resumed run continues the run it resumes; each flag that
changes one of them is printed. `--help` groups flags by the dataclass (or `setting(group=...)`) that declares them
and shows each one's default.

About 300 lines because it is the whole command-line layer of every entry point: parser, help
layout, preset files and their type coercion. A short loop of our own rather than tyro or
simple-parsing: those spell nested fields with a prefix
(`--algorithm.cql-weight`), while Tianshou's classic examples, whose flags users copy, are flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import shlex
import sys
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from offline_rl.apps.foreign_flags import foreign_flag_advice, names_of
from offline_rl.apps.programs import programs_holding
from offline_rl.errors import OfflineRLError
from offline_rl.settings import flag_of, leaf_fields, setting_key, setting_keys, spellings_of, validate_tree

Config = TypeVar("Config")
EXIT_USER_ERROR = 2
CONFIG_FLAG = "--config"


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser whose long flags also answer to their snake_case spelling, and whose
    errors are one line (plus usage) with exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.known_flags: set[str] = set()
        # No prefixes: with argparse's default, CORL's `--cql_alpha 10` (its conservative weight) was taken
        # as `--cql_alpha_lr 10` and trained with α′'s learning rate at 10, without a word.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
        return super().add_argument(*self._spellings(name_or_flags), **kwargs)

    def add_argument_group(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        group = super().add_argument_group(*args, **kwargs)
        plain_add = group.add_argument
        group.add_argument = lambda *names, **kw: plain_add(*self._spellings(names), **kw)  # type: ignore[method-assign]
        return group

    def _spellings(self, names: Sequence[str]) -> list[str]:
        spellings = _with_snake_case(names)
        self.known_flags.update(name for name in spellings if name.startswith("--"))
        return spellings

    def error(self, message: str) -> typing.NoReturn:  # type: ignore[override]
        # argparse names a flag by all its spellings ("--a-b/--a_b/--c"): the first one says enough
        message = re.sub(r"argument (--[\w-]+)(?:/--[\w-]+)+", r"argument \1", message)
        if message.startswith("unrecognized arguments: "):
            flags = [word for word in message.split(" ")[2:] if word.startswith("--")]
            advice = [foreign_flag_advice(flag, self.known_flags) for flag in flags]
            message = "; ".join([message, *(line for line in advice if line)])
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USER_ERROR)


def shell_quoted(value: object) -> str:
    """`value` as it must be typed in a command printed for the user to copy: quoted only where a
    shell would split or expand it (a space, a quote, `$`), so ordinary paths print as they are."""
    return shlex.quote(str(value))


def _with_snake_case(names: Sequence[str]) -> list[str]:
    result = list(names)
    for name in names:
        if name.startswith("--") and "-" in name[2:]:
            snake = "--" + name[2:].replace("-", "_")
            if snake not in result:
                result.append(snake)
    return result


def str_to_bool(value: str) -> bool:
    """yes/no spellings for `--flag false` (CORL's and simple-parsing's style)."""
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got '{value}'")


class _BoolFlag(argparse.Action):
    """`--x`, `--x true|false`, `--no-x` (and snake_case forms) for one boolean field."""

    def __init__(self, option_strings: list[str], dest: str, takes_value: bool = True, **kwargs: Any) -> None:
        self.negated = [
            ("--no-" if "-" in name[2:] or "_" not in name[2:] else "--no_") + name[2:] for name in option_strings
        ]
        super().__init__([*option_strings, *self.negated], dest, nargs="?" if takes_value else 0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, value: Any, option_string: str | None = None) -> None:
        if option_string in self.negated:
            if value is not None:
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
        else:
            try:
                setattr(namespace, self.dest, True if value in (None, []) else str_to_bool(value))
            except argparse.ArgumentTypeError as error:
                parser.error(f"{option_string}: {error}")

    def format_usage(self) -> str:
        return self.option_strings[0]


@dataclasses.dataclass(frozen=True)
class _FlagType:
    """How one field's values are read from text and shown in --help."""

    convert: Callable[[str], Any]
    is_bool: bool = False
    is_list: bool = False
    optional: bool = False
    container: type = list
    numbers: bool = False
    """A list of numbers: its text may also be written `64,64` or `[64, 64]`, as in YAML."""


def _flag_type(hint: Any) -> _FlagType:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = _flag_type(next(a for a in args if a is not type(None)))
        base = inner.convert

        def maybe_none(text: str) -> Any:
            return None if str(text).lower() in ("none", "null") else base(text)

        return dataclasses.replace(inner, convert=maybe_none, optional=True)
    if origin in (list, tuple):
        return _FlagType(convert=_scalar(args[0]), is_list=True, container=origin, numbers=args[0] in (int, float))
    if hint is bool:
        return _FlagType(convert=str_to_bool, is_bool=True)
    return _FlagType(convert=_scalar(hint))


def _scalar(hint: Any) -> Callable[[str], Any]:
    if hint in (int, float, str, Path):
        return hint
    raise TypeError(f"no command-line reading for a field of type {hint!r}")


@functools.cache
def _hints(owner: type) -> dict[str, Any]:
    return typing.get_type_hints(owner)


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) or "(none)"
    return "none" if value is None else str(value)


class _HelpFormatter(argparse.HelpFormatter):
    """Lists each flag's kebab-case spellings (the snake_case ones work too, but would double the list)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=110)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        shown = [name for name in action.option_strings if "_" not in name] or action.option_strings[:1]
        if action.nargs == 0:
            return ", ".join(shown)
        if isinstance(action, _BoolFlag) and action.nargs != 0:
            return ", ".join(name if name in action.negated else f"{name} [BOOL]" for name in shown)
        metavar = self._format_args(action, self._get_default_metavar_for_optional(action))
        return ", ".join(f"{name} {metavar}" for name in shown)


def _group_title(owner: Any, field: dataclasses.Field) -> str:
    return field.metadata.get("group") or getattr(owner, "FLAG_GROUP", None) or type(owner).__name__


def build_parser(default: Any, *, prog: str, description: str, epilog: str | None = None) -> FlagParser:
    """The parser for `default`'s fields (flat, grouped), with `default`'s values as defaults."""
    positionals = [field.name for _, field, _ in leaf_fields(default) if field.metadata.get("positional")]
    parser = FlagParser(
        prog=prog,
        description=description,
        epilog=epilog,
        usage="%(prog)s [-h] [--config FILE] [--flag VALUE ...]" + "".join(f" {name}" for name in positionals),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        CONFIG_FLAG,
        metavar="FILE",
        default=None,
        help="YAML preset: its settings become the defaults; flags given here override them",
    )
    groups: dict[str, Any] = {}
    seen: dict[str, str] = {}
    # With a positional argument, `--flag WORD` would read WORD as the flag's value: booleans take none.
    bool_takes_value = not any(field.metadata.get("positional") for _, field, _ in leaf_fields(default))
    for path, field, owner in leaf_fields(default):
        meta = field.metadata
        kind = _flag_type(_hints(type(owner))[field.name])
        names = spellings_of(field)
        for name in names:
            if name in seen:
                raise ValueError(f"flag {name} is declared twice ({seen[name]} and {'.'.join(path)})")
            seen[name] = ".".join(path)
        title = _group_title(owner, field)
        group = groups.get(title) or groups.setdefault(title, parser.add_argument_group(title))
        value = getattr(owner, field.name)
        help_text = (meta.get("help") or "").replace("%", "%%")
        if meta.get("required"):
            help_text += " (required)"
        else:
            help_text += f" (default: {_shown(value)})".replace("%", "%%")
        options: dict[str, Any] = {"dest": "/".join(path), "default": value, "help": help_text}
        if meta.get("choices") is not None:
            options["choices"] = list(meta["choices"])
        if kind.is_bool:
            group.add_argument(*names, action=_BoolFlag, takes_value=bool_takes_value, metavar="BOOL", **options)
            continue
        if meta.get("positional"):
            if kind.is_list or not meta.get("required"):
                options["nargs"] = "+" if kind.is_list else "?"
            group.add_argument(options.pop("dest"), type=kind.convert, metavar=field.name, **options)
            continue
        options["type"] = kind.convert
        options["required"] = bool(meta.get("required"))
        options["metavar"] = flag_of(field)[2:].replace("-", "_").upper()
        if kind.is_list:
            options["nargs"] = "+"
            if meta.get("repeatable"):  # `--grid a=1 --grid b=2` adds up rather than the last one winning
                options["action"], options["default"] = "extend", list(value or [])  # a copy: extend appends to it
        group.add_argument(*names, **options)
    return parser


def _flag_value(argv: Sequence[str], spellings: Sequence[str], what: str) -> str | None:
    """The value given to a flag (any spelling, `--flag VALUE` or `--flag=VALUE`), read before parsing."""
    for index, token in enumerate(argv):
        if token in spellings:
            if index + 1 >= len(argv):
                raise OfflineRLError(f"{spellings[0]}: expected {what}")
            return argv[index + 1]
        for spelling in spellings:
            if token.startswith(spelling + "="):
                return token.split("=", 1)[1]
    return None


def _find_preset(argv: Sequence[str]) -> str | None:
    return _flag_value(argv, [CONFIG_FLAG], "a YAML file")


RESUME_FIELD = "resume_path"


def _resumed_settings(default: Config, argv: Sequence[str], prog: str) -> tuple[Config, str] | None:
    """With `--resume-path FILE`, `default` with the settings of the run that wrote FILE (its
    `per_invocation` settings left as they are), and FILE; None without one, or for a checkpoint
    that saved no settings."""
    from offline_rl.settings import from_dict

    field = next((f for _, f, _ in leaf_fields(default) if f.name == RESUME_FIELD), None)
    path = _flag_value(argv, spellings_of(field), "a checkpoint file") if field is not None else None
    if not path:
        return None
    from offline_rl.checkpoint import saved_config  # torch: only when there is a checkpoint to read

    saved = saved_config(path)
    if not saved:
        return None
    try:
        restored = from_dict(type(default), saved)
    except (OfflineRLError, TypeError) as error:
        from offline_rl.apps.programs import program_recording
        from offline_rl.results.runs import flatten

        writer = program_recording(flatten(saved))
        if writer is not None and writer.command != prog:
            raise OfflineRLError(
                f"--resume-path {path}: a checkpoint of {writer.command}; give it to that program (this is {prog})"
            ) from None
        raise OfflineRLError(f"--resume-path {path}: its saved settings do not fit this program ({error})") from None
    kept = {
        path_: getattr(owner, f.name) for path_, f, owner in leaf_fields(default) if f.metadata.get("per_invocation")
    }
    return _replace_paths(restored, kept), str(path)


def _training_settings_not_taken(run: Any) -> tuple[str, ...]:
    """The settings of `run` (a config's `run` part, or None) that act on training alone, where the
    command does not train (`--watch`, `--export-policy`): none where it trains."""
    if run is None or getattr(run, "trains", True):
        return ()
    return tuple(getattr(run, "TRAINING_ONLY", ()))


def _drop_training_settings(config: Any, resumed: Any) -> None:
    """A command that only reads a run's networks (`--watch`, `--export-policy`) takes none of the
    settings that act on training alone (`RunConfig.TRAINING_ONLY`) from the run: they are reset to
    their defaults unless a flag changed them, so that `--watch` of a run trained with `--video-interval`
    is not refused for it, while `--watch --video-interval 5` of another run still is."""
    run, before = getattr(config, "run", None), getattr(resumed, "run", None)
    not_taken = _training_settings_not_taken(run)
    if before is None or not not_taken:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(run)}
    for name in not_taken:
        if getattr(run, name) == getattr(before, name):
            setattr(run, name, defaults[name])


def _report_overrides(resumed: Any, config: Any, source: str) -> None:
    """One line per setting a flag changed from what the resumed run used. A command that only reads the
    run's networks says nothing of the training-only settings it did not take (`_drop_training_settings`):
    `--watch` of a run filmed with `--video-interval 1` is not told that `--video-interval 0` overrides 1."""
    before = {path: getattr(owner, f.name) for path, f, owner in leaf_fields(resumed)}
    run = getattr(config, "run", None)
    not_taken = _training_settings_not_taken(run)
    for path, f, owner in leaf_fields(config):
        value = getattr(owner, f.name)
        if owner is run and f.name in not_taken:
            continue
        if not f.metadata.get("per_invocation") and value != before[path]:
            print(f"{flag_of(f)} {_shown(value)} overrides {_shown(before[path])} of the run in {source}")


def text_of(file: Path, where: str, expected: str = "a YAML file") -> str:
    """A settings file's text (a preset, a sweep), or one line saying why it cannot be read: a folder,
    a file that is not UTF-8 text (another format, or a bad copy) or that this user may not read."""
    try:
        return file.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise OfflineRLError(f"{where}: a folder; expected {expected}") from None
    except UnicodeDecodeError as error:
        raise OfflineRLError(
            f"{where}: not UTF-8 text (byte 0x{error.object[error.start]:02x} at position {error.start}); "
            f"expected {expected}"
        ) from None
    except OSError as error:
        raise OfflineRLError(f"{where}: cannot be read ({error.strerror or error})") from None


def load_preset(path: str | Path) -> dict[str, Any]:
    """A preset file's settings: a flat YAML mapping from setting (or flag) names to values."""
    import yaml

    file = Path(path).expanduser()
    if not file.exists():
        raise OfflineRLError(f"{CONFIG_FLAG} {file}: no such file")
    try:
        data = yaml.safe_load(text_of(file, f"{CONFIG_FLAG} {file}"))
    except yaml.YAMLError as error:
        raise OfflineRLError(f"{CONFIG_FLAG} {file}: not valid YAML ({str(error).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise OfflineRLError(f"{CONFIG_FLAG} {file}: expected a mapping of settings, got {type(data).__name__}")
    if len(_CORL_ONLY_KEYS & set(map(str, data))) >= 2:
        raise OfflineRLError(f"{CONFIG_FLAG} {file}: {_corl_config_hint(data)}")
    return data


# Keys of CORL's CQL config files (tinkoff-ai/CORL, configs/offline/cql/*) that name no setting here.
_CORL_ONLY_KEYS = names_of("CORL")


def _corl_config_hint(data: dict[str, Any]) -> str:
    """Where a CORL user's settings are here: CORL's CQL configs, one preset per D4RL dataset, in this
    toolkit's names (the README's "Preset files" maps the names); the dataset's own when it has one."""
    presets = Path(__file__).resolve().parents[2] / "configs" / "cql"
    own = presets / f"{data.get('env')}.yaml"
    where = f"configs/cql/{own.name}" if own.is_file() else "configs/cql/<dataset>.yaml"
    names = ", ".join(sorted(_CORL_ONLY_KEYS & set(map(str, data))))
    return (
        f"a CORL config ({names}); CORL's CQL settings are here as presets, in this toolkit's names: --config {where}"
    )


def apply_settings(default: Config, values: dict[str, Any], *, source: str) -> Config:
    """A copy of `default` with `values` (keyed by any flag spelling or field name) applied.

    A key that names no setting is a one-line error naming `source` and the key.
    """
    updates: dict[tuple[str, ...], Any] = {}
    for key, value in values.items():
        path, field, owner = setting_named(default, key, source=source)
        updates[path] = coerce_setting(owner, field, value, f"{source}: {key}")
    return _replace_paths(default, updates)


def apply_preset(default: Config, preset: str | Path, *, prog: str) -> Config:
    """A copy of `default` with the preset file's settings applied. A file written for another of the
    programs (`offline_rl.apps.programs`), e.g. an Atari preset given to d4rl_cql.py, is named as
    that program's, with the command that takes it, rather than by its first unknown key."""
    values = load_preset(preset)
    source = f"{CONFIG_FLAG} {preset}"
    unknown = [str(key) for key in values if _find_setting(default, str(key)) is None]
    owners = [program for program in programs_holding(values) if program.command != prog] if unknown else []
    if owners:
        named = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise OfflineRLError(
            f"{source}: a preset for {owners[0].command} ({named}: no settings of {prog}); "
            f"python {owners[0].command} {CONFIG_FLAG} {preset}"
        )
    return apply_settings(default, values, source=source)


def _find_setting(default: Any, key: str) -> tuple[tuple[str, ...], dataclasses.Field, Any] | None:
    """(path, field, owner) of the setting `key` names (`setting_key`: a field name or any flag
    spelling, with or without dashes), or None."""
    wanted = setting_key(key)
    for path, field, owner in leaf_fields(default):
        if wanted in setting_keys(field):
            return path, field, owner
    return None


def setting_named(default: Any, key: str, *, source: str) -> tuple[tuple[str, ...], dataclasses.Field, Any]:
    """(path, field, owner) of the setting `key` names (`_find_setting`); a one-line error naming
    `source` and the key when it names none."""
    found = _find_setting(default, key)
    if found is not None:
        return found
    known = {spelling for _, field, _ in leaf_fields(default) for spelling in spellings_of(field)}
    advice = foreign_flag_advice(str(key), known)
    raise OfflineRLError(f"{source}: unknown setting '{key}'" + (f"; {advice}" if advice else ""))


def coerce_setting(owner: Any, field: dataclasses.Field, value: Any, where: str) -> Any:
    """`value` (YAML or text) as the field's type; a one-line error naming `where` if it is not one."""
    return _coerce(value, _flag_type(_hints(type(owner))[field.name]), where)


def as_arguments(field: dataclasses.Field, value: Any) -> list[str]:
    """The command-line arguments that set `field` to `value` (as `coerce_setting` returns it)."""
    flag = flag_of(field)
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag[2:]]
    if isinstance(value, list | tuple):
        return [flag, *map(str, value)]
    return [flag, _shown(value)]


def _coerce(value: Any, kind: _FlagType, where: str) -> Any:
    try:
        if value is None:
            if not kind.optional:
                raise ValueError("null is not allowed here")
            return None
        if kind.is_list:
            items = value if isinstance(value, list | tuple) else _list_items(str(value), kind.numbers)
            return kind.container(kind.convert(item) for item in items)
        if kind.is_bool:
            return value if isinstance(value, bool) else str_to_bool(value)
        return kind.convert(value)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
        raise OfflineRLError(f"{where}: {value!r} is not valid ({error})") from None


def sets_flag(arguments: Sequence[str], flag: str) -> bool:
    """Whether a command line gives `flag` itself (`--threads 2` or `--threads=2`), so that whoever
    starts the command leaves that choice to it."""
    return any(argument == flag or argument.startswith(f"{flag}=") for argument in arguments)


def _list_items(text: str, numbers: bool) -> list[str]:
    """The items of a list setting given as one piece of text (`--set hidden_sizes=...` in a sweep):
    space-separated, as on an example's command line; numbers also comma-separated and bracketed,
    which no number contains but a file name might."""
    if numbers:
        return [item for item in re.split(r"[\s,]+", text.strip().removeprefix("[").removesuffix("]")) if item]
    return text.split()


def _replace_paths(config: Config, updates: dict[tuple[str, ...], Any]) -> Config:
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested = {path[1:]: v for path, v in updates.items() if path[0] == field.name}
            if nested:
                changes[field.name] = _replace_paths(value, nested)
        elif (field.name,) in updates:
            changes[field.name] = updates[(field.name,)]
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


def parse_config(
    default: Config,
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    epilog: str | None = None,
) -> Config:
    """Parse `argv` (default: `sys.argv[1:]`) into a validated copy of `default`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    preset = _find_preset(argv)
    if preset is not None:
        default = apply_preset(default, preset, prog=prog)
    resumed = _resumed_settings(default, argv, prog) if "-h" not in argv and "--help" not in argv else None
    if resumed is not None:
        default = resumed[0]
    parser = build_parser(default, prog=prog, description=description, epilog=epilog)
    namespace = vars(parser.parse_args(argv))
    updates = {}
    for path, field, owner in leaf_fields(default):
        value = namespace["/".join(path)]
        kind = _flag_type(_hints(type(owner))[field.name])
        # argparse gives lists for nargs='+': tuple-typed fields get tuples
        updates[path] = kind.container(value) if kind.is_list and value is not None else value
    config = _replace_paths(default, updates)
    if resumed is not None:
        _drop_training_settings(config, resumed[0])
    validate_tree(config)
    if resumed is not None:
        run = getattr(config, "run", None)
        trains = getattr(run, "trains", True)  # --watch and --export-policy only read the run's networks
        print(f"{'resuming' if trains else 'reading'} the run in {resumed[1]} with its own settings")
        _report_overrides(resumed[0], config, resumed[1])
    return config
