"""`offline_rl.results` on synthetic logs written in the real format (run.json + TensorBoard events):
known means, IQM, CI bounds, the CSV rows, and figures with the expected panels."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import forked
from offline_rl.results.command import write_results
from offline_rl.results.runs import read_runs


def write_run(
    folder: Path,
    *,
    dataset: str,
    seed: int,
    scores: list[float],
    cql_weight: float = 10.0,
    normalized: bool = False,
    finished: bool = True,
    config_update: dict | None = None,
) -> Path:
    """A run directory as the training loop writes it: run.json, eval/* and update/q_* scalars."""
    from offline_rl.core.import_order import use_tensorboard_without_tensorflow

    use_tensorboard_without_tensorflow()
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True)
    config = {"dataset": dataset, "run": {"seed": seed, "logdir": str(folder)}, "algorithm": {"cql_weight": cql_weight}}
    config.update(config_update or {})
    (folder / "run.json").write_text(json.dumps({"config": config, "dataset_info": {"name": dataset}}))
    writer = SummaryWriter(str(folder))
    for index, score in enumerate(scores, start=1):
        updates = 100 * index
        writer.add_scalar("eval/return_mean", score * 10, updates)
        writer.add_scalar("eval/return_std", 1.0, updates)
        if normalized:
            writer.add_scalar("eval/normalized_score", score, updates)
        for tag, offset in (("q_data", 0.0), ("q_random", -5.0), ("q_policy", -1.0)):
            writer.add_scalar(f"update/{tag}", offset + index, updates)
    writer.close()
    if finished:
        (folder / "summary.json").write_text("{}")
    return folder


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    finals = [0, 1, 2, 3, 4, 5, 6, 100]  # IQM drops the two lowest and the two highest: mean of 2..5 = 3.5
    for seed, final in enumerate(finals):
        write_run(
            tmp_path / "a" / f"s{seed}",
            dataset="hopper-medium-v2",
            seed=seed,
            scores=[50.0, 200.0, final],
            normalized=True,
        )
    for seed in range(3):
        write_run(
            tmp_path / "b" / f"s{seed}",
            dataset="walker2d-medium-v2",
            seed=seed,
            scores=[7.0, 7.0],
            normalized=True,
            finished=seed != 2,
        )
    return tmp_path


def test_the_table_has_the_known_mean_iqm_and_interval(logs: Path) -> None:
    from rliable import library, metrics

    result = write_results([logs], logs, reps=1000)
    hopper, walker = result["rows"]
    finals = np.array([0, 1, 2, 3, 4, 5, 6, 100], dtype=float)
    assert hopper.dataset == "hopper-medium-v2" and hopper.score_name == "normalized score"
    assert hopper.final.runs == 8 and hopper.final.mean == pytest.approx(finals.mean())
    assert hopper.final.std == pytest.approx(finals.std()) and hopper.final.iqm == pytest.approx(3.5)
    # The interval is rliable's stratified bootstrap, seeded as the table seeds it (numpy's global generator) ...
    np.random.seed(0)
    _, expected = library.get_interval_estimates(
        {"x": finals[:, None]},
        lambda x: np.array([metrics.aggregate_iqm(x)]),
        reps=1000,
    )
    assert (hopper.final.ci_low, hopper.final.ci_high) == pytest.approx(tuple(expected["x"][:, 0]))
    assert hopper.final.ci_low <= 3.5 <= hopper.final.ci_high and hopper.final.ci_high < 100
    # ... and collapses onto the value when every seed scores the same.
    assert (walker.final.iqm, walker.final.ci_low, walker.final.ci_high) == pytest.approx((7.0, 7.0, 7.0))
    assert walker.finished == 2 and walker.final.runs == 3
    # The best over training is there, and is the optimistic one: 200 for every hopper seed.
    assert hopper.best.mean == pytest.approx(200.0) and hopper.updates == 300
    table = (logs / "results.md").read_text()
    assert "| hopper-medium-v2 | default | 8 (8) | 300 | normalized score | 15.1 ± 32.1 | 3.5 [" in table
    assert "best (optimistic)" in table


def test_the_last_k_evaluations_can_be_averaged(logs: Path) -> None:
    rows = write_results([logs / "a"], logs / "out", last_k=2, reps=200)["rows"]
    finals = np.array([0, 1, 2, 3, 4, 5, 6, 100], dtype=float)
    assert rows[0].final.mean == pytest.approx(np.mean((finals + 200) / 2))
    assert "mean of the last 2 evaluations" in (logs / "out" / "results.md").read_text()


def test_the_csv_has_a_row_per_run_and_evaluation(logs: Path) -> None:
    write_results([logs], logs, reps=200)
    with (logs / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8 * 3 + 3 * 2
    first = rows[0]
    assert first["dataset"] == "hopper-medium-v2" and first["updates"] == "100" and first["normalized_score"] == "50"
    assert first["return_mean"] == "500" and first["evaluation"] == "1"


def test_settings_that_differ_label_the_groups(tmp_path: Path) -> None:
    for weight in (1.0, 5.0):
        for seed in range(2):
            write_run(tmp_path / f"w{weight}-{seed}", dataset="d", seed=seed, scores=[1.0], cql_weight=weight)
    runs = read_runs([tmp_path])
    assert sorted({run.setting for run in runs}) == ["cql_weight=1.0", "cql_weight=5.0"]
    assert all(not run.normalized for run in runs)  # no reference returns: the score is the return


def test_a_matmul_precision_labels_its_group_where_the_device_and_threads_do_not(tmp_path: Path) -> None:
    """TF32 against float32 is a comparison of arithmetic; the GPU or the thread count a run had is not."""
    for precision, device, threads in (("highest", "cuda", 4), ("highest", "cuda:1", 8), ("high", "cuda", 4)):
        torch_settings = {"matmul_precision": precision, "device": device, "threads": threads}
        write_run(
            tmp_path / f"{precision}-{device}",
            dataset="d",
            seed=0,
            scores=[1.0],
            config_update={"run": {"seed": 0, "torch": torch_settings}},
        )
    assert sorted(run.setting for run in read_runs([tmp_path])) == [
        "matmul_precision=high",
        "matmul_precision=highest",
        "matmul_precision=highest",
    ]


def test_where_a_run_logged_its_curves_does_not_label_its_group(tmp_path: Path) -> None:
    """Seeds of one setting, some also sent to W&B (one group and name per trial), are one row."""
    loggers = [{"logger": "tensorboard"}, {"logger": "wandb", "wandb_group": "g", "wandb_name": "seed=1"}]
    for seed, logging in enumerate(loggers):
        config = {"run": {"seed": seed, "logging": {"wandb_project": f"p{seed}", "wandb_name": None, **logging}}}
        write_run(tmp_path / str(seed), dataset="d", seed=seed, scores=[1.0], config_update=config)
    assert [run.setting for run in read_runs([tmp_path])] == ["default", "default"]


def test_labels_name_what_differs_within_a_dataset_not_what_follows_the_dataset(tmp_path: Path) -> None:
    """A sweep over D4RL datasets changes the task with the dataset: `task=...` would label every
    group and tell nothing. A setting is named alike on every dataset, even one that ran only it."""
    grid = [("hopper-medium-v2", "Hopper-v4", 1.0), ("hopper-medium-v2", "Hopper-v4", 5.0)]
    grid += [("walker2d-medium-v2", "Walker2d-v4", 5.0)]
    for dataset, task, weight in grid:
        folder = tmp_path / f"{dataset}-{weight}"
        write_run(folder, dataset=dataset, seed=0, scores=[1.0], cql_weight=weight, config_update={"task": task})
    assert {(run.dataset, run.setting) for run in read_runs([tmp_path])} == {
        ("hopper-medium-v2", "cql_weight=1.0"),
        ("hopper-medium-v2", "cql_weight=5.0"),
        ("walker2d-medium-v2", "cql_weight=5.0"),
    }


def test_runs_of_different_programs_on_their_own_datasets_are_each_default(tmp_path: Path) -> None:
    continuous, discrete = {"cql_weight": 5.0, "tau": 0.005}, {"num_quantiles": 200}
    for name, algorithm in (("pendulum.hdf5", continuous), ("pong.hdf5", discrete)):
        write_run(tmp_path / name, dataset=name, seed=0, scores=[1.0], config_update={"algorithm": algorithm})
    assert {run.setting for run in read_runs([tmp_path])} == {"default"}


def test_a_table_of_algorithms_on_one_dataset_names_each_by_its_program(tmp_path: Path) -> None:
    """CQL, TD3+BC and BC runs on one dataset: one row per program, a program's own varying setting
    after its name, and none of another algorithm's settings in a label."""
    algorithms = {
        "cql": {"cql_weight": 5.0},
        "td3_bc_a": {"alpha": 2.5, "policy_noise": 0.2},
        "td3_bc_b": {"alpha": 1.0, "policy_noise": 0.2},
        "bc": {"top_fraction": 0.1},
    }
    for name, algorithm in algorithms.items():
        for seed in (0, 1):
            folder = tmp_path / name / str(seed)
            write_run(folder, dataset="hopper-random", seed=seed, scores=[1.0], config_update={"algorithm": algorithm})
    labels = {run.path.parent.name: run.setting for run in read_runs([tmp_path])}
    assert labels == {
        "cql": "d4rl_cql",
        "td3_bc_a": "d4rl_td3_bc alpha=2.5",
        "td3_bc_b": "d4rl_td3_bc alpha=1.0",
        "bc": "d4rl_bc",
    }


def test_the_figures_have_a_panel_per_dataset_with_labels_and_legends(logs: Path) -> None:
    from offline_rl.results.plots import conservatism_figure, score_figure

    result = write_results([logs], logs, reps=200)
    for name in ("scores", "conservatism"):
        path = result["files"][name]
        assert path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = read_runs([logs])
    scores = score_figure(runs)
    assert [ax.get_title() for ax in scores.axes] == ["hopper-medium-v2", "walker2d-medium-v2"]
    for ax, seeds in zip(scores.axes, (8, 3), strict=True):
        assert ax.get_xlabel() == "gradient updates" and ax.get_ylabel() == "D4RL normalised score"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"default ({seeds} seeds)"]
        assert len(ax.collections) == 1  # the shaded interval
    hopper_line = scores.axes[0].lines[0]
    assert list(hopper_line.get_xdata()) == [100, 200, 300]
    assert hopper_line.get_ydata()[-1] == pytest.approx(np.mean([0, 1, 2, 3, 4, 5, 6, 100]))
    conservatism = conservatism_figure(runs)
    labels = [t.get_text() for t in conservatism.axes[0].get_legend().get_texts()]
    assert labels == ["q_data, default", "q_random, default", "q_policy, default"]
    assert conservatism.axes[0].lines[1].get_ydata()[0] == pytest.approx(-4.0)  # q_random: offset -5, step 1


def test_no_runs_is_one_line(tmp_path: Path) -> None:
    from offline_rl.core.errors import OfflineRLError

    with pytest.raises(OfflineRLError, match="no run with an evaluation found"):
        write_results([tmp_path])


def test_diverged_runs_are_counted_and_left_out_of_the_scores(tmp_path: Path) -> None:
    for seed, final in enumerate([10.0, 20.0, 99.0]):
        folder = write_run(tmp_path / "a" / f"s{seed}", dataset="d", seed=seed, scores=[5.0, final], finished=seed < 2)
        if seed == 2:  # stopped by divergence after two evaluations: its last one is not where it ended
            (folder / "diverged.json").write_text(json.dumps({"message": "training diverged: td_loss inf"}))
    for seed in range(2):  # a setting whose every run diverged, one of them before any evaluation
        folder = write_run(
            tmp_path / "b" / f"s{seed}", dataset="d", seed=seed, scores=[1.0] * seed, cql_weight=1.0, finished=False
        )
        (folder / "diverged.json").write_text("{}")
    result = write_results([tmp_path], tmp_path / "out", reps=50)
    scored, all_diverged = sorted(result["rows"], key=lambda row: row.setting, reverse=True)
    assert scored.setting == "cql_weight=10.0" and (scored.runs, scored.finished, scored.diverged) == (3, 2, 1)
    assert scored.final.runs == 2 and scored.final.mean == pytest.approx(150.0) and scored.best.mean == 150.0
    assert all_diverged.final is None and (all_diverged.runs, all_diverged.diverged) == (2, 2)
    table = result["table"]
    assert "| d | cql_weight=10.0 | 3 (2; 1 diverged) | 200 | return | 150.0 ± 50.0 |" in table
    assert "| d | cql_weight=1.0 | 2 (0; 2 diverged) | - | - | diverged | diverged | diverged |" in table
    assert "left out of the scores" in table
    assert (tmp_path / "out" / "scores.png").stat().st_size > 0


def test_one_run_shows_its_score_without_a_spread_or_an_interval() -> None:
    """A bootstrap over one run returns its own score as both ends: "± 0.0 ... [x, x]" claimed a
    certainty no single seed gives."""
    from offline_rl.results.report import GroupRow, markdown_table
    from offline_rl.results.score_statistics import aggregate

    def row(scores: list[float]) -> GroupRow:
        final = aggregate(np.array(scores), reps=50)
        n = len(scores)
        return GroupRow("d", "default", "return", final, final, updates=100, finished=n, runs=n, diverged=0)

    table = markdown_table([row([245.8]), row([1.0, 3.0])])
    assert "| 245.8 (1 run) | 245.8 (1 run: no interval) | 245.8 (1 run) |" in table
    assert "| 2.0 ± 1.0 | 2.0 [" in table


def test_fitted_q_estimates_add_a_column_and_the_setting_they_pick(tmp_path: Path) -> None:
    """Two settings × three seeds: FQE ranks the runs as their final scores do except for one pair, and its
    highest-estimated setting is not the best-scoring one; a run without fqe.json is counted apart."""
    runs = [  # (cql_weight, seed, final score, FQE estimate)
        (1.0, 0, 10.0, 30.0),
        (1.0, 1, 20.0, 40.0),
        (1.0, 2, 30.0, 150.0),
        (5.0, 0, 40.0, 60.0),
        (5.0, 1, 50.0, 70.0),
        (5.0, 2, 60.0, None),
    ]
    for weight, seed, final, estimate in runs:
        folder = write_run(
            tmp_path / f"w{weight}-s{seed}",
            dataset="hopper-medium-v2",
            seed=seed,
            scores=[0.0, final],
            cql_weight=weight,
            normalized=True,
        )
        if estimate is not None:
            (folder / "fqe.json").write_text(json.dumps({"fqe_value": estimate, "fqe_updates": 100}))
    result = write_results([tmp_path], tmp_path / "out", reps=200)
    low, high = result["rows"]
    assert low.fqe == [30.0, 40.0, 150.0] and high.fqe == [60.0, 70.0] and high.fqe_final == [40.0, 50.0]
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| best (optimistic): mean ± std | FQE estimate: mean ± std |" in table
    assert f"| {np.mean([30, 40, 150]):.1f} ± {np.std([30, 40, 150]):.1f} |" in table
    assert "| 65.0 ± 5.0 (2 estimated) |" in table
    # FQE's means: 73.3 (weight 1) > 65 (weight 5), so it picks weight 1, which scored 20 where weight 5's
    # estimated runs scored 45; ranks of the estimates 30 40 150 60 70 against the scores 10 20 30 40 50:
    # ρ = 1 - 6·(0+0+4+1+1)/(5·24) = 0.7.
    assert (
        "- hopper-medium-v2: FQE picks cql_weight=1.0 (final score 20.0); the best final score is cql_weight=5.0's "
        "(45.0). Spearman's ρ of estimate and final score over its 5 runs: 0.70." in table
    )
    with (tmp_path / "out" / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {row["fqe_value"] for row in rows if "w5.0-s2" in row["run"]} == {""}
    assert {row["fqe_value"] for row in rows if "w1.0-s2" in row["run"]} == {"150"}


def test_without_fitted_q_estimates_the_table_is_as_before(logs: Path) -> None:
    table = write_results([logs], logs / "out", reps=200)["table"]
    assert "FQE" not in table and table.splitlines()[-1].startswith("| walker2d-medium-v2 |")


def test_atari_runs_are_scored_and_labelled_by_the_human_normalized_score(tmp_path: Path) -> None:
    """An Atari run's normalised score is the human-normalised one (0 random, 100 human), so its row and
    its panel say so; D4RL's runs beside it keep their label. Every game's DQN Replay files are named
    alike, so a run's data is named after its game too: Pong's runs are not averaged with Breakout's."""
    from offline_rl.results.plots import score_figure

    files = [f"/data/{{game}}/1/ckpt_{index}-first_0.01.hdf5" for index in range(51)]
    for game, final in (("Pong", 20.0), ("Breakout", 60.0)):
        for seed in range(2):
            write_run(
                tmp_path / game / f"s{seed}",
                dataset=None,
                seed=seed,
                scores=[10.0, final],
                normalized=True,
                config_update={"task": f"ALE/{game}-v5", "load_buffer_name": [f.format(game=game) for f in files]},
            )
    write_run(tmp_path / "hopper" / "s0", dataset="hopper-medium-v2", seed=0, scores=[5.0], normalized=True)
    result = write_results([tmp_path], tmp_path, reps=100)
    rows = {row.dataset: (row.score_name, row.runs, row.final.mean) for row in result["rows"]}
    assert rows == {
        "Breakout/ckpt_{0-50}-first_0.01.hdf5": ("human-normalized score", 2, 60.0),
        "Pong/ckpt_{0-50}-first_0.01.hdf5": ("human-normalized score", 2, 20.0),
        "hopper-medium-v2": ("normalized score", 1, 5.0),
    }
    labels = {ax.get_title(): ax.get_ylabel() for ax in score_figure(read_runs([tmp_path])).axes}
    assert labels["Pong/ckpt_{0-50}-first_0.01.hdf5"] == "human-normalised score"
    assert labels["hopper-medium-v2"] == "D4RL normalised score"


def test_a_run_from_before_a_setting_existed_counts_as_its_default(tmp_path: Path) -> None:
    """A sweep upgraded half-way: its first trials' run.json predate --test-steps and --cnn. Read at
    their defaults (what the program did before them), they share a row with the later trials, and
    only a run that set one of them is told apart."""
    from offline_rl.cli import atari_cql
    from offline_rl.cli.programs import program_recording

    recorded = json.loads(json.dumps(dataclasses.asdict(atari_cql.AtariCQLConfig()), default=str))
    older = json.loads(json.dumps(recorded))
    del older["run"]["test_steps"], older["algorithm"]["cnn"]
    budget = json.loads(json.dumps(recorded))
    budget["run"]["test_steps"] = 125_000
    for name, config in (("older", older), ("newer", recorded), ("budget", budget)):
        folder = tmp_path / name
        write_run(folder, dataset="pong.hdf5", seed=0, scores=[1.0], config_update=config)
        saved = json.loads((folder / "run.json").read_text())  # as the program writes it: no top-level dataset
        saved["config"].pop("dataset")
        saved["config"]["load_buffer_name"] = ["pong.hdf5"]
        (folder / "run.json").write_text(json.dumps(saved))
    runs = {run.path.name: run for run in read_runs([tmp_path])}
    assert runs["older"].settings["test_steps"] == 0 and runs["older"].settings["cnn"] == "nature"
    assert runs["older"].setting == runs["newer"].setting == "test_steps=0"
    assert runs["budget"].setting == "test_steps=125000"
    assert program_recording({"test_steps", "cnn", "load_buffer_name"}).command == "examples/atari_cql.py"
    assert program_recording({"test_steps", "no_such_setting"}) is None  # a setting since removed: nothing filled


def test_the_command_prints_the_table_and_names_its_files_and_no_runs_is_one_line_exit_2(
    logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`python -m offline_rl.results` as the README runs it, in a process of its own."""
    import sys

    from conftest import script_env

    output = tmp_path_factory.mktemp("out")
    command = [sys.executable, "-m", "offline_rl.results", str(logs), "--output", str(output), "--last-k", "1"]
    result = forked.run(command, capture_output=True, text=True, env=script_env(), cwd=output, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert any("hopper-medium-v2" in line for line in lines) and any("walker2d-medium-v2" in line for line in lines)
    written = ("results.csv", "results.md", "scores.png", "conservatism.png")
    assert lines[-1] == f"{len(read_runs([logs]))} runs; wrote " + ", ".join(str(output / name) for name in written)
    assert all((output / name).stat().st_size > 0 for name in written)
    empty = tmp_path_factory.mktemp("empty")
    result = forked.run(
        [sys.executable, "-m", "offline_rl.results", str(empty)], capture_output=True, text=True, env=script_env()
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "no run with an evaluation found" in result.stderr


def test_a_run_without_an_evaluation_is_left_out_with_a_warning_naming_it(logs: Path) -> None:
    """A run started but not yet evaluated, or one whose TensorBoard log a bad copy damaged, would
    otherwise vanish from the table without a word."""
    from offline_rl.core.errors import OfflineRLWarning

    counted = len(read_runs([logs]))
    write_run(logs / "c" / "s0", dataset="hopper-medium-v2", seed=9, scores=[], normalized=True, finished=False)
    with pytest.warns(
        OfflineRLWarning, match=r"left out 1 run folder\(s\) whose TensorBoard logs hold no evaluation: "
    ):
        assert len(read_runs([logs])) == counted


@pytest.mark.parametrize("record", ["[]", '{"config": 3}', '"text"'])
def test_a_run_record_of_another_shape_is_one_line(tmp_path: Path, record: str) -> None:
    from offline_rl.core.errors import OfflineRLError

    run = write_run(tmp_path / "s0", dataset="hopper-medium-v2", seed=0, scores=[1.0])
    (run / "run.json").write_text(record)
    with pytest.raises(OfflineRLError, match=r"run\.json: not a run record \(expected a JSON object whose 'config'"):
        read_runs([tmp_path])
