"""Command lines built from configuration dataclasses: one field, one flag.

`parse_config(default, argv, ...)` walks a (nested) config dataclass, adds one flag per field
(Tianshou's kebab-case spelling, the snake_case one, declared aliases, `--x/--no-x` for booleans,
space-separated lists), parses `argv`, and returns a validated copy of `default`. `--config FILE`
loads a YAML preset first (`offline_rl.cli.presets`): its values become the defaults, and flags given
on the command line override them. `--resume-path CHECKPOINT` does the same with the settings saved in
the checkpoint (dataset and budget included), so a resumed run continues the run it resumes; each flag
that changes one of them is printed. `--help` groups flags by the dataclass (or `setting(group=...)`)
that declares them and shows each one's default.

A short layer of our own rather than tyro or simple-parsing: those spell nested fields with a prefix
(`--algorithm.cql-weight`), while Tianshou's classic examples, whose flags users copy, are flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from collections.abc import Sequence
from typing import Any

from offline_rl.cli.foreign_flags import foreign_flag_advice
from offline_rl.cli.presets import (
    CONFIG_FLAG,
    Config,
    apply_preset,
    flag_type,
    replace_paths,
    require_text,
    shown_value,
    str_to_bool,
    type_hints_of,
)
from offline_rl.cli.programs import program_recording
from offline_rl.core.errors import EXIT_USER_ERROR, OfflineRLError
from offline_rl.core.settings import flag_of, flatten, from_dict, leaf_fields, spellings_of, validate_tree


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


def _with_snake_case(names: Sequence[str]) -> list[str]:
    result = list(names)
    for name in names:
        if name.startswith("--") and "-" in name[2:]:
            snake = "--" + name[2:].replace("-", "_")
            if snake not in result:
                result.append(snake)
    return result


class _BoolFlag(argparse.Action):
    """`--x`, `--x true|false`, `--no-x` (and snake_case forms) for one boolean field."""

    def __init__(self, option_strings: list[str], dest: str, takes_value: bool = True, **kwargs: Any) -> None:
        self.negated = [
            ("--no-" if "-" in name[2:] or "_" not in name[2:] else "--no_") + name[2:] for name in option_strings
        ]
        super().__init__([*option_strings, *self.negated], dest, nargs="?" if takes_value else 0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, value: Any, option_string: str | None = None) -> None:
        if option_string in self.negated:
            if value not in (None, []):  # nargs 0 (beside a positional) passes [], "?" passes None
                parser.error(f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
        else:
            try:
                setattr(namespace, self.dest, True if value in (None, []) else str_to_bool(value))
            except argparse.ArgumentTypeError as error:
                parser.error(f"{option_string}: {error}")

    def format_usage(self) -> str:
        return self.option_strings[0]


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
        kind = flag_type(type_hints_of(type(owner))[field.name])
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
            help_text += f" (default: {shown_value(value)})".replace("%", "%%")
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


def _resumed_settings(default: Config, argv: Sequence[str], prog: str) -> tuple[Config, str, dict[str, Any]] | None:
    """With `--resume-path FILE`, `default` with the settings of the run that wrote FILE (its
    `per_invocation` settings left as they are), FILE and what it holds; None without one, or for a
    checkpoint that saved no settings."""

    field = next((f for _, f, _ in leaf_fields(default) if f.name == RESUME_FIELD), None)
    path = _flag_value(argv, spellings_of(field), "a checkpoint file") if field is not None else None
    if not path:
        return None
    from offline_rl.runs.checkpoint import load_checkpoint  # torch: only when there is a checkpoint to read

    checkpoint = load_checkpoint(path, "cpu")
    saved = checkpoint.get("config")
    if not saved or not isinstance(saved, dict):
        return None
    try:
        restored = from_dict(type(default), saved)
    except (OfflineRLError, TypeError) as error:
        writer = program_recording(flatten(saved))
        if writer is not None and writer.command != prog:
            raise OfflineRLError(
                f"--resume-path {path}: a checkpoint of {writer.command}; give it to that program (this is {prog})"
            ) from None
        raise OfflineRLError(f"--resume-path {path}: its saved settings do not fit this program ({error})") from None
    kept = {
        path_: getattr(owner, f.name) for path_, f, owner in leaf_fields(default) if f.metadata.get("per_invocation")
    }
    return replace_paths(restored, kept), str(path), checkpoint


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
            print(f"{flag_of(f)} {shown_value(value)} overrides {shown_value(before[path])} of the run in {source}")


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
        require_text(value, flag_of(field))
        kind = flag_type(type_hints_of(type(owner))[field.name])
        # argparse gives lists for nargs='+': tuple-typed fields get tuples
        updates[path] = kind.container(value) if kind.is_list and value is not None else value
    config = replace_paths(default, updates)
    if resumed is not None:
        _drop_training_settings(config, resumed[0])
    validate_tree(config)
    if resumed is not None:
        run = getattr(config, "run", None)
        trains = getattr(run, "trains", True)  # --watch and --export-policy only read the run's networks
        if trains:
            from offline_rl.runs.checkpoint import require_training_checkpoint  # torch: loaded above already

            final_weights = bool(getattr(config, "starts_from_final_weights", False))
            require_training_checkpoint(resumed[2], resumed[1], final_weights=final_weights)
        print(f"{'resuming' if trains else 'reading'} the run in {resumed[1]} with its own settings")
        _report_overrides(resumed[0], config, resumed[1])
    return config
