"""Dataset -> Tianshou HDF5 buffer conversion shared by the scripts in `converters/`.

A converted buffer loads in a fraction of the time of its source (no episode bookkeeping, no
per-episode Minari reads) and with `ReplayBuffer.load_hdf5` alone, so other Tianshou code can use
it without this package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tianshou.data import ReplayBuffer

from offline_rl.cli import FlagParser
from offline_rl.data.buffers import save_buffer
from offline_rl.data.stats import dataset_stats
from offline_rl.envs import check_dataset_fits_env
from offline_rl.errors import OfflineRLError


def build_converter_parser(prog: str, source_help: str, *, with_download: bool) -> FlagParser:
    parser = FlagParser(prog=prog, description=f"Convert {source_help} to a Tianshou HDF5 replay buffer.")
    parser.add_argument("source", help=source_help)
    parser.add_argument("--output", required=True, type=Path, help="buffer file to write (.hdf5)")
    parser.add_argument("--task", default=None, help="gymnasium id whose spaces the data must fit")
    parser.add_argument("--compression", default=None, choices=[None, "gzip", "lzf"])
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    if with_download:
        parser.add_argument("--download", action="store_true", help="fetch the dataset if it is not on disk")
    return parser


def run_conversion(
    argv: Sequence[str] | None,
    parser: FlagParser,
    load: Callable[[str, bool], ReplayBuffer],
) -> int:
    """Parse flags, load, check against `--task`, save atomically and print the statistics."""
    args = parser.parse_args(argv)
    output: Path = args.output.expanduser()
    if output.exists() and not args.overwrite:
        raise OfflineRLError(f"{output}: already exists (pass --overwrite to replace it)")
    buffer = load(args.source, bool(getattr(args, "download", False)))
    if args.task:
        check_dataset_fits_env(buffer, args.task, source=args.source)
    save_buffer(buffer, output, compression=args.compression)
    stats = dataset_stats(buffer)
    print(stats.summary())
    print(f"wrote {output}: {stats.transitions} transitions, {stats.episodes} episodes")
    return 0
