"""A setting is declared once, as a dataclass field that carries its help text, flag spellings and range.

The command-line parser (`offline_rl.cli.flags`), preset files, checkpoints and range checks all
read that one field, so adding a hyper-parameter means adding one `setting(...)` line to one
dataclass. This module knows nothing about argparse: algorithm packages can use it without pulling
in the application layer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

from offline_rl.core.errors import OfflineRLError


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    aliases: Sequence[str] = (),
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
    choices: Sequence[Any] | None = None,
    group: str | None = None,
    required: bool = False,
    positional: bool = False,
    per_invocation: bool = False,
    repeatable: bool = False,
    infinite: float | None = None,
    details: str = "",
) -> Any:
    """A dataclass field with everything the rest of the toolkit needs to know about it.

    `flag` is the main spelling (default: `--field-name`); `aliases` are older or other projects'
    spellings (snake_case forms of every spelling are accepted automatically). `minimum`/`maximum`
    are inclusive bounds, `above` and `below` exclusive ones; for lists they apply to every element.
    A list default is copied per instance. `required` fields must be given on the command line;
    `positional` ones are given there without a flag. `per_invocation` settings belong to one
    command, not to the run it continues (`--resume-path`, `--device`): resuming does not restore them.
    A `repeatable` list flag may be given several times, its values adding up.
    A float setting is a finite number, or the one infinity declared as `infinite` (`math.inf` or
    `-math.inf`: the side on which a clip or a cap is off; the other one would clip every value to
    infinity). NaN is never a value, since it would silently poison every update.
    `help` is the flag's one or two lines of `--help`; `details`, what the documentation's settings
    reference says beyond it (where a value comes from, what it costs).
    """
    metadata = {
        "help": help,
        "flag": flag,
        "aliases": tuple(aliases),
        "minimum": minimum,
        "above": above,
        "maximum": maximum,
        "below": below,
        "choices": tuple(choices) if choices is not None else None,
        "group": group,
        "positional": positional,
        "per_invocation": per_invocation,
        "repeatable": repeatable,
        "infinite": infinite,
        "details": details,
    }
    if required or default is dataclasses.MISSING:
        return dataclasses.field(default=None, metadata={**metadata, "required": True})
    if isinstance(default, list | dict):
        frozen = list(default) if isinstance(default, list) else dict(default)
        return dataclasses.field(default_factory=lambda: type(frozen)(frozen), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_of(field: dataclasses.Field) -> str:
    """The main command-line spelling of a field."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def changed_settings(config: Any, names: Sequence[str]) -> list[tuple[str, Any]]:
    """(flag, value) of each named field of `config` whose value is not the field's declared default:
    the choices someone made, by flag or preset, rather than those the program made for them."""
    fields = {field.name: field for field in dataclasses.fields(config)}
    changed = []
    for name in names:
        field = fields[name]
        if getattr(config, name) != declared_default(field):
            changed.append((flag_of(field), getattr(config, name)))
    return changed


def spellings_of(field: dataclasses.Field) -> list[str]:
    """Every accepted spelling: the main flag, its aliases, and the snake_case form of each."""
    names = [flag_of(field), *field.metadata.get("aliases", ())]
    result: list[str] = []
    for name in names:
        for spelling in (name, "--" + name[2:].replace("-", "_")):
            if spelling not in result:
                result.append(spelling)
    return result


def setting_key(name: str) -> str:
    """How a preset key, a sweep key or a run's recorded setting names a field, whichever spelling it
    uses (a field name, a flag, with or without dashes): `--cql-weight` and `cql_weight` alike."""
    return str(name).lstrip("-").replace("-", "_")


def setting_keys(field: dataclasses.Field) -> set[str]:
    """Every `setting_key` that names `field`."""
    return {setting_key(spelling) for spelling in spellings_of(field)}


def leaf_fields(config: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any]]:
    """(path, field, owner instance) for every non-dataclass field: a config's own fields first, then
    those of the configs nested in it, in declaration order."""
    nested = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested.append((field.name, value))
        else:
            yield (*path, field.name), field, config
    for name, value in nested:
        yield from leaf_fields(value, (*path, name))


# Seeds reach numpy's legacy `np.random.seed`, which takes 32-bit unsigned integers only.
SEED_RANGE: dict[str, int] = {"minimum": 0, "maximum": 2**32 - 1}


def _number(value: float) -> str:
    """A bound as the user would type it: integers in full (4294967295, not 4.29497e+09)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range_text(meta: dict[str, Any]) -> str | None:
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    below = meta.get("below")
    if below is not None:
        opening = f"[{_number(low)}" if low is not None else f"({_number(above)}" if above is not None else None
        return f"a value in {opening}, {_number(below)})" if opening else f"less than {_number(below)}"
    if low is not None and high is not None:
        return f"a value in [{_number(low)}, {_number(high)}]"
    if above is not None and high is not None:
        return f"a value in ({_number(above)}, {_number(high)}]"
    if low is not None:
        return f"at least {_number(low)}"
    if above is not None:
        return "a positive number" if above == 0 else f"more than {_number(above)}"
    if high is not None:
        return f"at most {_number(high)}"
    return None


def _in_range(value: float, meta: dict[str, Any]) -> bool:
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    below = meta.get("below")
    return (
        (low is None or value >= low)
        and (above is None or value > above)
        and (high is None or value <= high)
        and (below is None or value < below)
    )


def check_ranges(config: Any) -> None:
    """Raise a one-line OfflineRLError naming the flag of the first field outside its declared range.

    Nested configs are checked by their own `validate()`, not here.
    """
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        meta = field.metadata
        if meta.get("required") and value is None:
            raise OfflineRLError(f"{flag_of(field)}: required")
        if value is None or isinstance(value, bool) or dataclasses.is_dataclass(value):
            continue
        choices = meta.get("choices")
        if choices is not None and value not in choices:
            raise OfflineRLError(f"{flag_of(field)} {value}: expected one of {', '.join(map(str, choices))}")
        _check_finite(field, value)
        expected = _range_text(meta)
        if expected is None:
            continue
        items = list(value) if isinstance(value, list | tuple) else [value]
        if isinstance(value, list | tuple) and not items:
            raise OfflineRLError(f"{flag_of(field)}: expected at least one value")
        for item in items:
            if not _in_range(item, meta):
                shown = " ".join(map(str, value)) if isinstance(value, list | tuple) else value
                raise OfflineRLError(f"{flag_of(field)} {shown}: expected {expected}")


def _check_finite(field: dataclasses.Field, value: Any) -> None:
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, float) or math.isfinite(item):
            continue
        off = field.metadata.get("infinite")
        if math.isnan(item) or item != off:
            allowed = f" or {off} (off)" if off is not None else ""
            raise OfflineRLError(f"{flag_of(field)} {item}: expected a finite number{allowed}")


def require(condition: bool, message: str) -> None:
    """A cross-setting check of `validate()`: a one-line error when `condition` does not hold."""
    if not condition:
        raise OfflineRLError(message)


def validate_tree(config: Any) -> None:
    """Call `validate()` (or the range checks alone) on `config` and every config nested in it."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            validate_tree(value)
    validate = getattr(config, "validate", None)
    if callable(validate):
        validate()
    else:
        check_ranges(config)


def from_dict(config_class: type, data: dict[str, Any]) -> Any:
    """Rebuild a config from `dataclasses.asdict` output (a checkpoint's), nested configs included.

    Keys may be any accepted spelling of a field (so dicts saved before a rename still load);
    a key that names no field is an error, because it would silently change what a run means.
    """
    by_spelling: dict[str, dataclasses.Field] = {}
    for field in dataclasses.fields(config_class):
        by_spelling[field.name] = field
        for spelling in spellings_of(field):
            by_spelling.setdefault(spelling[2:].replace("-", "_"), field)
    legacy = getattr(config_class, "translate_legacy", None)
    if callable(legacy):
        data = legacy(dict(data))
    values: dict[str, Any] = {}
    for key, value in data.items():
        field = by_spelling.get(str(key).replace("-", "_"))
        if field is None:
            raise OfflineRLError(f"unknown setting '{key}' for {config_class.__name__}")
        nested = _nested_class(field)
        if nested is not None and isinstance(value, dict):
            value = from_dict(nested, value)
        elif isinstance(value, list) and isinstance(field.default, tuple):
            value = tuple(value)  # saved as a list (JSON has no tuples): equal to the flag's own value again
        values[field.name] = value
    return config_class(**values)


def _nested_class(field: dataclasses.Field) -> type | None:
    default = declared_default(field)
    return type(default) if dataclasses.is_dataclass(default) else None


def declared_default(field: dataclasses.Field) -> Any:
    """The value a field takes when nothing sets it (a fresh copy of a list or nested config)."""
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def flatten(config: dict[str, Any]) -> dict[str, Any]:
    """Leaf settings of a nested config dict, by their (unique) field names."""
    leaves: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            leaves.update(flatten(value))
        else:
            leaves[key] = value
    return leaves
