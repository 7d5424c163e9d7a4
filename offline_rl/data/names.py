"""One short, exact label for several files or datasets loaded as one: `ckpt_{0-50}.hdf5`, not 51 names.

The paper protocols train on dozens of files at once (a DQN Replay run's 51 checkpoints, RL
Unplugged's shards). Every line that names the data, and the run summary that results tables group
runs by, named each file: three screens of names per run, and a table row no one could read. Names
that differ in one number only are written once with that number's values as ranges; any other set
is joined whole, so that a label never stands for two different sets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PIECES = re.compile(r"\d+|\D+")


def combined_label(names: Sequence[str], *, joiner: str = " + ") -> str:
    """`Pong/1/ckpt.{0-50}` for names alike but for one number; else the names joined by `joiner`."""
    unique = list(dict.fromkeys(map(str, names)))
    if len(unique) == 1:
        return unique[0]
    pieces = [_PIECES.findall(name) for name in unique]
    if len({len(split) for split in pieces}) == 1:
        differing = [i for i in range(len(pieces[0])) if len({split[i] for split in pieces}) > 1]
        if len(differing) == 1 and all(split[differing[0]].isdigit() for split in pieces):
            at = differing[0]
            values = "{" + number_ranges([split[at] for split in pieces]) + "}"
            return "".join(pieces[0][:at]) + values + "".join(pieces[0][at + 1 :])
    return joiner.join(unique)


def number_ranges(numbers: list[str]) -> str:
    """`0-3,7,9-10`: runs of consecutive values, each number written as it was (zero padding kept)."""
    ordered = sorted(numbers, key=lambda number: (int(number), number))
    runs: list[list[str]] = []
    for number in ordered:
        if runs and int(number) == int(runs[-1][-1]) + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
