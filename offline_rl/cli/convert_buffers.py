"""Dataset -> Tianshou HDF5 buffer conversion shared by the scripts in `converters/`.

A converted buffer loads in a fraction of the time of its source (no episode bookkeeping, no
per-episode Minari reads) and with `ReplayBuffer.load_hdf5` alone, so other Tianshou code can use
it without this package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from offline_rl.cli.flags import parse_config
from offline_rl.core.files import check_output
from offline_rl.core.settings import setting

if TYPE_CHECKING:
    from tianshou.data import ReplayBuffer


@dataclass
class ConversionConfig:
    """What to convert and where the buffer goes."""

    FLAG_GROUP: ClassVar[str] = "conversion"

    source: str = setting(help="the dataset to convert", required=True, positional=True)
    output: Path = setting(help="buffer file to write (.hdf5)", required=True)
    task: str | None = setting(None, "gymnasium id whose spaces the data must fit")
    compression: str | None = setting(None, "HDF5 compression of the buffer", choices=(None, "gzip", "lzf"))
    overwrite: bool = setting(False, "replace an existing output file")


@dataclass
class DownloadableConversionConfig(ConversionConfig):
    download: bool = setting(False, "fetch the dataset if it is not on disk", group="conversion")


def conversion_config_from_args(
    default: ConversionConfig, argv: Sequence[str] | None, *, prog: str, source_help: str
) -> ConversionConfig:
    description = f"Convert {source_help} to a Tianshou HDF5 replay buffer."
    return parse_config(default, argv, prog=prog, description=description)


def run_conversion(
    argv: Sequence[str] | None,
    default: ConversionConfig,
    load: Callable[[str, bool], ReplayBuffer],
    *,
    prog: str,
    source_help: str,
) -> int:
    """Parse flags, load, check against `--task`, save atomically and print the statistics. `load`
    imports its reader itself, so that `--help` and a flag error answer without torch and Tianshou."""
    config = conversion_config_from_args(default, argv, prog=prog, source_help=source_help)
    # after the flags: the buffer needs torch and Tianshou (seconds to import); --help does not
    from offline_rl.data.buffers import save_buffer  # heavy (h5py, Tianshou, torch): loaded only when used
    from offline_rl.data.fit import check_dataset_belongs_to_task  # gymnasium: kept out of --help's start
    from offline_rl.data.stats import dataset_stats  # heavy (Tianshou): loaded only when used

    output = check_output(config.output, flag="--output", overwrite=config.overwrite)
    buffer = load(config.source, bool(getattr(config, "download", False)))
    if config.task:
        check_dataset_belongs_to_task(buffer, config.task, source=config.source)
    save_buffer(buffer, output, compression=config.compression)
    stats = dataset_stats(buffer)
    print(stats.summary())
    print(f"wrote {output}: {stats.transitions} transitions, {stats.episodes} episodes")
    return 0


def convert_d4rl(argv: Sequence[str] | None = None) -> int:
    """`converters/d4rl.py` and `offline-rl-convert-d4rl`: D4RL names download on demand, as D4RL
    itself does; a path is read as it is."""

    def load(source: str, _download: bool) -> ReplayBuffer:
        from offline_rl.data import load_d4rl  # heavy (gymnasium, h5py, Tianshou, torch, tqdm): loaded only when used

        return load_d4rl(source, download=True)

    return run_conversion(
        argv,
        ConversionConfig(),
        load,
        prog="converters/d4rl.py",
        source_help="a D4RL HDF5 file or dataset name (e.g. halfcheetah-medium-v2)",
    )


def convert_minari(argv: Sequence[str] | None = None) -> int:
    """`converters/minari.py` and `offline-rl-convert-minari`."""

    def load(source: str, download: bool) -> ReplayBuffer:
        from offline_rl.data import load_minari  # heavy (gymnasium, h5py, Tianshou, torch, tqdm): loaded only when used

        return load_minari(source, download=download)

    return run_conversion(
        argv,
        DownloadableConversionConfig(),
        load,
        prog="converters/minari.py",
        source_help="a Minari dataset id or dataset directory",
    )
