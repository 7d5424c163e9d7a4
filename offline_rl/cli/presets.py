"""Setting values from text: the type each flag parses into, and YAML preset files.

A preset file is a flat map of setting names (field names or flag spellings) to values, read safely
(YAML's safe loader: a file from elsewhere never runs code) and checked like the command line: every
key must name a setting of the program, every value must have that setting's type."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from offline_rl.cli.foreign_flags import foreign_flag_advice, names_of
from offline_rl.cli.programs import programs_holding
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.settings import flag_of, leaf_fields, setting_key, setting_keys, spellings_of

Config = TypeVar("Config")


def str_to_bool(value: str) -> bool:
    """yes/no spellings for `--flag false` (CORL's and simple-parsing's style)."""
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got '{value}'")


@dataclasses.dataclass(frozen=True)
class FlagType:
    """How one field's values are read from text and shown in --help."""

    convert: Callable[[str], Any]
    is_bool: bool = False
    is_list: bool = False
    optional: bool = False
    container: type = list
    numbers: bool = False
    """A list of numbers: its text may also be written `64,64` or `[64, 64]`, as in YAML."""
    base: type | None = None
    """The type of the value (of each item, for a list)."""


def flag_type(hint: Any) -> FlagType:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = flag_type(next(a for a in args if a is not type(None)))
        base = inner.convert

        def maybe_none(text: str) -> Any:
            return None if str(text).lower() in ("none", "null") else base(text)

        return dataclasses.replace(inner, convert=maybe_none, optional=True)
    if origin in (list, tuple):
        numbers = args[0] in (int, float)
        return FlagType(convert=scalar_type(args[0]), is_list=True, container=origin, numbers=numbers, base=args[0])
    if hint is bool:
        return FlagType(convert=str_to_bool, is_bool=True, base=bool)
    return FlagType(convert=scalar_type(hint), base=hint)


def scalar_type(hint: Any) -> Callable[[str], Any]:
    if hint in (int, float, str, Path):
        return hint
    raise TypeError(f"no command-line reading for a field of type {hint!r}")


@functools.cache
def type_hints_of(owner: type) -> dict[str, Any]:
    return typing.get_type_hints(owner)


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


def unique_key_loader() -> Any:
    """A safe YAML loader that refuses a key given twice in one mapping (YAML would keep the last)."""
    import yaml  # PyYAML: kept out of --help's start

    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"'{key}' appears twice", key_node.start_mark)
            seen.add(key)
        return loader.construct_mapping(node, deep)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeyLoader


def require_text(value: Any, flag: str) -> None:
    """A command line's bytes that are not UTF-8 (a file name in another encoding) reach Python as lone
    surrogates, which every library that writes the name (TensorBoard, HDF5, JSON) fails on later
    with a traceback: one line now."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                shown = item.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                raise OfflineRLError(f"{flag} {shown}: holds bytes that are not UTF-8; expected a UTF-8 name") from None


def load_preset(path: str | Path) -> dict[str, Any]:
    """A preset file's settings: a flat YAML mapping from setting (or flag) names to values."""
    import yaml  # PyYAML: kept out of --help's start

    require_text(str(path), CONFIG_FLAG)
    file = Path(path).expanduser()
    if not file.exists():
        raise OfflineRLError(f"{CONFIG_FLAG} {file}: no such file")
    try:
        data = yaml.load(text_of(file, f"{CONFIG_FLAG} {file}"), Loader=unique_key_loader())
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


def apply_settings(
    default: Config, values: dict[str, Any], *, source: str, index: SettingsIndex | None = None
) -> Config:
    """A copy of `default` with `values` (keyed by any flag spelling or field name) applied.

    A key that names no setting is a one-line error naming `source` and the key.
    """
    index = settings_index(default) if index is None else index
    updates: dict[tuple[str, ...], Any] = {}
    for key, value in values.items():
        path, field, owner = setting_named(default, key, source=source, index=index)
        updates[path] = coerce_setting(owner, field, value, f"{source}: {key}")
    return replace_paths(default, updates)


def apply_preset(default: Config, preset: str | Path, *, prog: str) -> Config:
    """A copy of `default` with the preset file's settings applied. A file written for another of the
    programs (`offline_rl.cli.programs`), e.g. an Atari preset given to d4rl_cql.py, is named as
    that program's, with the command that takes it, rather than by its first unknown key."""
    values = load_preset(preset)
    source = f"{CONFIG_FLAG} {preset}"
    index = settings_index(default)
    unknown = [str(key) for key in values if _find_setting(default, str(key), index) is None]
    owners = [program for program in programs_holding(values) if program.command != prog] if unknown else []
    if owners:
        named = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise OfflineRLError(
            f"{source}: a preset for {owners[0].command} ({named}: no settings of {prog}); "
            f"python {owners[0].command} {CONFIG_FLAG} {preset}"
        )
    return apply_settings(default, values, source=source, index=index)


SettingsIndex = dict[str, tuple[tuple[str, ...], dataclasses.Field, Any]]


def settings_index(default: Any) -> SettingsIndex:
    """(path, field, owner) of each setting of `default` under every `setting_key` that names it (a
    field name or any flag spelling, with or without dashes); where two fields share a key, the
    first in declaration order. Built once for all the keys of a preset or sweep file."""
    index: SettingsIndex = {}
    for path, field, owner in leaf_fields(default):
        for key in setting_keys(field):
            index.setdefault(key, (path, field, owner))
    return index


def _find_setting(
    default: Any, key: str, index: SettingsIndex | None = None
) -> tuple[tuple[str, ...], dataclasses.Field, Any] | None:
    """(path, field, owner) of the setting `key` names, or None."""
    return (settings_index(default) if index is None else index).get(setting_key(key))


def setting_named(
    default: Any, key: str, *, source: str, index: SettingsIndex | None = None
) -> tuple[tuple[str, ...], dataclasses.Field, Any]:
    """(path, field, owner) of the setting `key` names (`_find_setting`); a one-line error naming
    `source` and the key when it names none."""
    found = _find_setting(default, key, index)
    if found is not None:
        return found
    known = {spelling for _, field, _ in leaf_fields(default) for spelling in spellings_of(field)}
    advice = foreign_flag_advice(str(key), known)
    raise OfflineRLError(f"{source}: unknown setting '{key}'" + (f"; {advice}" if advice else ""))


def coerce_setting(owner: Any, field: dataclasses.Field, value: Any, where: str) -> Any:
    """`value` (YAML or text) as the field's type; a one-line error naming `where` if it is not one."""
    return _coerce(value, flag_type(type_hints_of(type(owner))[field.name]), where)


def as_arguments(field: dataclasses.Field, value: Any) -> list[str]:
    """The command-line arguments that set `field` to `value` (as `coerce_setting` returns it)."""
    flag = flag_of(field)
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag[2:]]
    if isinstance(value, list | tuple):
        return [flag, *map(str, value)]
    return [flag, shown_value(value)]


def _coerce(value: Any, kind: FlagType, where: str) -> Any:
    try:
        if value is None:
            if not kind.optional:
                raise ValueError("null is not allowed here")
            return None
        if kind.is_list:
            items = value if isinstance(value, list | tuple) else _list_items(str(value), kind.numbers)
            return kind.container(kind.convert(_of_its_type(item, kind.base)) for item in items)
        if kind.is_bool:
            return value if isinstance(value, bool) else str_to_bool(value)
        return kind.convert(_of_its_type(value, kind.base))
    except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
        raise OfflineRLError(f"{where}: {value!r} is not valid ({error})") from None


def _of_its_type(value: Any, base: type | None) -> Any:
    """A YAML value held to the setting's type rather than converted into it: `epoch: 1.5` or
    `seed: true` is refused, where int() would make them 1."""
    if base in (int, float) and isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} where a number is expected")
    if base is int and isinstance(value, float):
        raise ValueError("not a whole number" if not value.is_integer() else "a float where a whole number is expected")
    return value


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


def replace_paths(config: Config, updates: dict[tuple[str, ...], Any]) -> Config:
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested = {path[1:]: v for path, v in updates.items() if path[0] == field.name}
            if nested:
                changes[field.name] = replace_paths(value, nested)
        elif (field.name,) in updates:
            changes[field.name] = updates[(field.name,)]
    return dataclasses.replace(config, **changes)  # type: ignore[type-var]


CONFIG_FLAG = "--config"


def shown_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) or "(none)"
    return "none" if value is None else str(value)
