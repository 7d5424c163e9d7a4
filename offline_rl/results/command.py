"""The `results` command: its settings, and writing the tables and plots of the runs under LOGDIRs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from offline_rl.cli.flags import parse_config
from offline_rl.core.files import check_output
from offline_rl.core.settings import check_ranges, setting
from offline_rl.results.score_statistics import DEFAULT_REPS

PROG = "python -m offline_rl.results"
DESCRIPTION = "Tables (results.csv, results.md) and plots (scores.png, conservatism.png) of the runs under LOGDIRs."


@dataclass
class ResultsConfig:
    FLAG_GROUP: ClassVar[str] = "results"

    logdirs: list[str] = setting(help="log directories to read (searched recursively)", required=True, positional=True)
    output: str | None = setting(None, "where to write the files (default: the first LOGDIR)")
    last_k: int = setting(1, "final score = mean of the last k evaluations of each run (1: the last)", minimum=1)
    reps: int = setting(DEFAULT_REPS, "bootstrap replications of the confidence intervals", minimum=100)

    def validate(self) -> None:
        check_ranges(self)


def write_results(
    logdirs: Sequence[str | Path], output: str | Path | None = None, *, last_k: int = 1, reps: int = DEFAULT_REPS
) -> dict[str, Any]:
    """Read the runs, write the four files, return their paths and the table rows."""
    from offline_rl.results.plots import (  # gymnasium: kept out of --help's start
        conservatism_figure,
        save_figure,
        score_figure,
    )
    from offline_rl.results.report import (  # gymnasium: kept out of --help's start
        group_rows,
        markdown_table,
        write_csv,
        write_markdown,
    )
    from offline_rl.results.runs import read_runs  # gymnasium: kept out of --help's start

    runs = read_runs(logdirs)
    given = output is not None
    folder = check_output(output if given else logdirs[0], flag="--output" if given else "LOGDIR", directory=True)
    rows = group_rows(runs, last_k=last_k, reps=reps)
    files = {
        "csv": write_csv(runs, folder / "results.csv"),
        "markdown": write_markdown(rows, folder / "results.md", last_k=last_k),
        "scores": save_figure(score_figure(runs), folder / "scores.png"),
        "conservatism": save_figure(conservatism_figure(runs), folder / "conservatism.png"),
    }
    return {"runs": len(runs), "rows": rows, "files": files, "table": markdown_table(rows, last_k=last_k)}


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(ResultsConfig(), argv, prog=PROG, description=DESCRIPTION)
    result = write_results(config.logdirs, config.output, last_k=config.last_k, reps=config.reps)
    print(result["table"], end="")
    files = result["files"]
    print(
        f"{result['runs']} runs; wrote {files['csv']}, {files['markdown']}, {files['scores']}, {files['conservatism']}"
    )
    return 0
