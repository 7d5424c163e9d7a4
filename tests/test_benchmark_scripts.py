"""The benchmark scripts start like the examples: without TensorFlow.

Tianshou imports TensorBoard, which imports TensorFlow whenever it is installed (the `rlu` extra):
seconds of start-up and a screen of log lines before every benchmark. Importing `offline_rl` first
selects TensorBoard's TensorFlow-free stub (`offline_rl.core.import_order`).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, load_benchmark, modules_imported_by

BENCHMARKS = REPO_ROOT / "benchmarks"


def imported_roots(path: Path) -> list[str]:
    """Top-level packages a module imports at module level, in order (`__future__` left out)."""
    roots: list[str] = []
    for statement in ast.parse(path.read_text()).body:
        if isinstance(statement, ast.Import):
            roots += [alias.name.split(".")[0] for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
            roots.append(statement.module.split(".")[0])
    return [root for root in roots if root != "__future__"]


def test_every_benchmark_that_reaches_tianshou_imports_offline_rl_first() -> None:
    scripts = {path.stem: imported_roots(path) for path in sorted(BENCHMARKS.glob("*.py"))}
    reaching = {name for name, roots in scripts.items() if "tianshou" in roots}
    while True:  # siblings importing a sibling that imports Tianshou reach it too
        more = {name for name, roots in scripts.items() if reaching & set(roots)} - reaching
        if not more:
            break
        reaching |= more
    assert {"cql_sac_throughput", "baselines", "timing"} <= reaching  # the search itself works
    late = sorted(name for name in reaching if scripts[name][0] != "offline_rl")
    assert not late, f"import offline_rl before anything else in benchmarks/{late[0]}.py"


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs the rlu extra (TensorFlow)")
def test_a_benchmark_leaves_tensorflow_unimported() -> None:
    watched = ("tianshou", "tensorboard", "tensorflow")
    assert modules_imported_by("benchmarks/cql_sac_throughput.py", ["--help"], watched=watched) == [
        "tensorboard",
        "tianshou",
    ]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--runs", "1", "2", "4"], [(1, None), (2, None), (4, None)]),  # no MPS: processes take turns
        (["--runs", "1", "2", "4", "--mps"], [(1, None), (2, 100), (4, 50)]),  # the sweep's shares; one run alone
        (  # a scan of shares: each group once per share, one run alone once
            ["--runs", "1", "4", "--mps", "--mps-thread-percentage", "35", "65"],
            [(1, None), (4, 35), (4, 65)],
        ),
    ],
)
def test_concurrent_runs_times_one_run_alone_and_each_group_at_each_share(
    flags: list[str], expected: list[tuple[int, int | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    concurrent_runs = load_benchmark("concurrent_runs", monkeypatch)
    args, _ = concurrent_runs.parser().parse_known_args(flags)
    assert concurrent_runs.groups(args) == expected


def test_concurrent_runs_start_the_example_through_the_variant_launcher_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    concurrent_runs = load_benchmark("concurrent_runs", monkeypatch)
    plain, _ = concurrent_runs.parser().parse_known_args([])
    assert concurrent_runs.base_command(plain)[1] == str(concurrent_runs.EXAMPLE)
    varied, _ = concurrent_runs.parser().parse_known_args(["--critic-variant", "ensemble", "relu-in-product"])
    assert varied.critic_variant == ["ensemble", "relu-in-product"]
    assert concurrent_runs.base_command(varied, "ensemble")[1] == str(concurrent_runs.EXAMPLE)  # the library's own
    command = concurrent_runs.base_command(varied, "relu-in-product")
    assert command[1:4] == [str(concurrent_runs.VARIANT_LAUNCHER), "relu-in-product", str(concurrent_runs.EXAMPLE)]


def test_concurrent_runs_time_training_alone_or_whole_runs_with_their_evaluations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training-only: one epoch of --updates, timed by the statistics windows. Whole runs: the example's
    own schedule, timed from evaluation to evaluation, so the time spent evaluating counts."""
    from torch.utils.tensorboard import SummaryWriter

    concurrent_runs = load_benchmark("concurrent_runs", monkeypatch)
    training, _ = concurrent_runs.parser().parse_known_args(["--updates", "9000"])
    assert concurrent_runs.schedule(training) == ["--epoch", "1", "--test-num", "1", "--step-per-epoch", "9000"]
    whole, _ = concurrent_runs.parser().parse_known_args(["--whole-runs", "10"])
    assert concurrent_runs.schedule(whole) == ["--epoch", "10"]  # --step-per-epoch and --test-num: the example's

    # 5 epochs of 1000 updates: training at 100 updates/s (a window every 100), a 10 s evaluation after each
    writer = SummaryWriter(str(tmp_path / "run"))
    clock = 1000.0
    for epoch in range(5):
        for window in range(1, 11):
            clock += 1.0
            writer.add_scalar(concurrent_runs.TRAINING_WINDOWS, 0.0, epoch * 1000 + window * 100, walltime=clock)
        clock += 10.0
        writer.add_scalar(concurrent_runs.EVALUATIONS, 0.0, (epoch + 1) * 1000, walltime=clock)
    writer.close()
    # from the first evaluation at 20% of the updates (1000) to the last: 4 epochs of 10 s training + 10 s evaluation
    assert concurrent_runs.steady_rate(tmp_path / "run", concurrent_runs.EVALUATIONS) == pytest.approx(4000 / 80)
    # windows from update 1000 to 5000 span the same 80 s, so training-only timing runs a single epoch
    assert concurrent_runs.steady_rate(tmp_path / "run") == pytest.approx(4000 / 80)
    (tmp_path / "one").mkdir()
    writer = SummaryWriter(str(tmp_path / "one"))
    for window in range(1, 11):
        writer.add_scalar(concurrent_runs.TRAINING_WINDOWS, 0.0, window * 100, walltime=1000.0 + window)
    writer.add_scalar(concurrent_runs.EVALUATIONS, 0.0, 1000, walltime=1020.0)
    writer.close()
    assert concurrent_runs.steady_rate(tmp_path / "one") == pytest.approx(100.0)  # windows 200 to 1000: 800 in 8 s


def test_a_d3rlpy_column_is_left_out_where_d3rlpy_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    d3rlpy_baseline = load_benchmark("d3rlpy_baseline", monkeypatch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert d3rlpy_baseline.modes_from(None, "cuda") == []
    assert d3rlpy_baseline.modes_from("eager,compiled", "cpu") == []


def test_a_d3rlpy_that_does_not_import_stops_the_benchmark_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed without its dependencies (as wheels on a GPU machine are), d3rlpy fails to import: the
    benchmark says why in one line instead of quietly timing one column fewer."""
    d3rlpy_baseline = load_benchmark("d3rlpy_baseline", monkeypatch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "d3rlpy", None)  # `import d3rlpy` raises ImportError
    with pytest.raises(SystemExit, match=r"^d3rlpy is installed but does not import \(.*\); --d3rlpy none leaves"):
        d3rlpy_baseline.modes_from(None, "cpu")
    assert d3rlpy_baseline.modes_from("none", "cpu") == []


def test_a_tf_agents_that_does_not_import_stops_the_benchmark_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    tf_agents_baseline = load_benchmark("tf_agents_baseline", monkeypatch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert tf_agents_baseline.modes_from(None) == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "tf_agents", None)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # the check quiets TensorFlow: undone after the test
    with pytest.raises(SystemExit, match=r"^tf_agents is installed but does not import \(.*\); --tf-agents none"):
        tf_agents_baseline.modes_from(None)
    assert tf_agents_baseline.modes_from("none") == []


def test_a_cpu_refuses_the_paths_it_would_only_run_eagerly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compiled and captured updates are replayed CUDA graphs; on a CPU they would run eagerly under
    another path's name, and a table would compare an update with itself."""
    timing = load_benchmark("timing", monkeypatch)
    parser = argparse.ArgumentParser(prog="cql_sac_throughput.py")
    timing.refuse_cuda_only_paths(parser, ["eager", "eager-blas"], "cpu")
    timing.refuse_cuda_only_paths(parser, ["eager", "compiled", "captured+sorted"], "cuda")
    with pytest.raises(SystemExit):
        timing.refuse_cuda_only_paths(parser, ["eager", "compiled", "captured+sorted"], "cpu")
    assert "--paths compiled,captured+sorted: CUDA only" in capsys.readouterr().err


CRITIC_VARIANTS = [
    "merged-first-layer",
    "bias-in-product",
    "relu-in-product",
    "merged-relu-in-product",
    "state-projection",
    "state-projection-relu-in-product",
    "pointwise-first-layer",
    "pointwise-first-layer-relu-in-product",
]


def test_every_critic_variant_is_checked_against_the_ensemble(monkeypatch: pytest.MonkeyPatch) -> None:
    critic_variants = load_benchmark("critic_variants", monkeypatch)
    assert set(critic_variants.VARIANTS) == {"ensemble", *CRITIC_VARIANTS}


@pytest.mark.parametrize("variant", CRITIC_VARIANTS)
@pytest.mark.parametrize("detach_params", [False, True])
def test_a_critic_variant_computes_the_ensembles_q_values_and_gradients(
    variant: str, detach_params: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the profile compares on a GPU must be the same function: values, the parameters' gradients
    (the critic loss) and the actions' gradients (the actor loss, through constant critics)."""
    import torch

    from offline_rl.algorithms.networks import EnsembleCritic

    critic_variants = load_benchmark("critic_variants", monkeypatch)
    torch.manual_seed(0)
    reference = EnsembleCritic(5, 2, [8, 6], num_critics=2).double()
    for bias in reference.biases:  # orthogonal initialisation zeroes them; a bias must count here
        torch.nn.init.uniform_(bias, -0.5, 0.5)
    variant_critic = EnsembleCritic(5, 2, [8, 6], num_critics=2).double()
    variant_critic.load_state_dict(reference.state_dict())
    variant_critic.__class__ = critic_variants.VARIANTS[variant]
    obs = torch.randn(3, 5, dtype=torch.float64)
    actions = torch.rand(3, 4, 2, dtype=torch.float64).mul(2).sub(1)
    results = []
    for critic in (reference, variant_critic):
        acts = actions.clone().requires_grad_(True)
        q = critic(obs, acts, detach_params=detach_params)
        q.mul(torch.linspace(-1, 1, q.numel(), dtype=q.dtype).view_as(q)).sum().backward()
        grads = [acts.grad] + [param.grad for param in critic.parameters()]
        results.append((q, grads))
    (q_ref, grads_ref), (q_var, grads_var) = results
    assert q_var.shape == (2, 3, 4)
    torch.testing.assert_close(q_var, q_ref)
    for got, expected in zip(grads_var, grads_ref, strict=True):
        if expected is None:
            assert got is None
        else:
            torch.testing.assert_close(got, expected)


def test_the_profiles_held_table_weighs_each_kernel_by_the_share_of_the_gpu_its_grid_covers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The held time and the ratio it predicts decide what a lent GPU's few minutes time next."""
    import json
    import types

    import torch

    profile = load_benchmark("cql_sac_profile", monkeypatch)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(multi_processor_count=100)
    )
    kernels = [  # two updates: a wide kernel (200 blocks: all 100 SMs) and a narrow one (25 blocks: a quarter)
        {"cat": "kernel", "name": "wide", "dur": 100.0, "args": {"grid": [50, 4, 1]}},
        {"cat": "kernel", "name": "narrow", "dur": 80.0, "args": {"grid": [25, 1, 1]}},
        {"cat": "cpu_op", "name": "aten::mm", "dur": 500.0},
    ] * 2

    class Trace:
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text(json.dumps({"traceEvents": kernels}))

    profile.print_held_table(Trace(), steps=2, top=5, whole=200e-6 - profile.TRAINER_EXTRA_S)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("GPU-held: 120.0 µs per update of 180.0 µs of kernels (100 SMs)")
    assert lines[1].endswith("would do 1.67× one run alone")  # 200 µs alone over 120 held
    assert "100.0 µs held" in lines[2] and "wide" in lines[2] and "200 blocks" in lines[2]
    assert "20.0 µs held" in lines[3] and "narrow" in lines[3]


def test_the_d3rlpy_agreement_tells_equal_expectations_from_different_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The statistics behind `d3rlpy_agreement.py`'s verdicts: draws of one distribution agree, a shift
    of a few standard errors does not, a gradient-like vector whose coordinates move together is judged
    along its projections, and a coordinate drawn without noise must match exactly."""
    import numpy as np

    agreement = load_benchmark("expectation_agreement", monkeypatch).agreement
    rng = np.random.default_rng(1)
    same = agreement(rng.normal(3.0, 1.0, 400), rng.normal(3.0, 1.0, 400))
    assert same.agrees() and same.max_abs_z < 4
    assert not agreement(rng.normal(3.5, 1.0, 400), rng.normal(3.0, 1.0, 400)).agrees()  # z ≈ 7

    per_state = (400, 128)
    assert agreement(rng.normal(0, 1, per_state), rng.normal(0, 1, per_state), independent=True).agrees()
    scattered = rng.choice([-0.25, 0.25], 128)  # a difference of changing sign, as a Jensen gap gives
    shifted = agreement(rng.normal(scattered, 1, per_state), rng.normal(0, 1, per_state), independent=True)
    assert shifted.mean_z_squared > 3 and not shifted.agrees()

    common = rng.normal(0, 1, (400, 1))  # every coordinate moves with one shared draw, as a gradient's do
    direction = rng.normal(0, 1, 3000)

    def gradient_like(scale: float) -> np.ndarray:
        return common * direction + rng.normal(0, 0.1, (400, 3000)) + scale * direction

    equal = agreement(gradient_like(1.0), gradient_like(1.0))
    assert equal.agrees()
    assert not agreement(gradient_like(1.5), gradient_like(1.0)).agrees()  # e.g. a factor on one loss term

    exact = np.ones((400, 2))
    assert agreement(exact, exact.copy()).agrees()
    off = agreement(exact * [1.0, 1.001], exact)
    assert not off.agrees() and np.isinf(off.z).any()


@pytest.mark.parametrize(
    ("bug", "statistic"),
    [
        ("constant-random-actions", "q_random"),
        ("terminals-bootstrap", "target_q"),
        ("no-density-correction", "cql_gap"),
    ],
)
def test_each_planted_bug_changes_our_update_where_it_says(
    bug: str, statistic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plant` is what shows that the comparison with d3rlpy can fail: each planted mistake must change
    our update's statistic of the term it names (same weights, same draws), and only with the plant."""
    import torch

    script = load_benchmark("d3rlpy_agreement", monkeypatch)
    batch = script.make_batch(0)

    def statistics(planted: str | None) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        algorithm = script.build_ours({"backup_entropy": True})
        if planted:
            script.plant(algorithm, planted)
        torch.manual_seed(1)
        from offline_rl.algorithms.staging import Transitions

        columns = Transitions(batch.obs, batch.act, batch.rew, 1.0 - batch.terminated, batch.obs_next)
        return algorithm.compute_losses(columns).figures

    clean, again, planted = statistics(None), statistics(None), statistics(bug)
    assert torch.equal(clean[statistic], again[statistic])
    assert not torch.allclose(clean[statistic], planted[statistic])
    assert torch.equal(clean["q_data"], planted["q_data"])  # the weights and the data's values are untouched
    with pytest.raises(ValueError, match="no planted bug"):
        script.plant(script.build_ours({}), "no-such-bug")


def test_both_of_our_builds_give_d3rlpy_the_same_layer_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights reach d3rlpy's networks layer by layer: ours and the Tianshou drop-in's networks must both
    come out as d3rlpy builds them, (out, in) weights in its order (hidden layers, mean head, log-std
    head; per critic, its layers over the state beside the action), and the gradients in that layout too."""
    import torch

    script = load_benchmark("d3rlpy_agreement", monkeypatch)
    hidden, obs_dim, act_dim = script.HIDDEN, script.OBS_DIM, script.ACT_DIM
    actor_shapes = [(hidden[0], obs_dim), (hidden[1], hidden[0]), (act_dim, hidden[1]), (act_dim, hidden[1])]
    critic_shapes = [(hidden[0], obs_dim + act_dim), (hidden[1], hidden[0]), (1, hidden[1])]
    batch = script.make_batch(0)
    for algorithm in (script.build_ours({}), script.build_tianshou_dropin({"calibrated": False})):
        assert [tuple(w.shape) for w, _ in script.actor_layers(algorithm.actor)] == actor_shapes
        for member in range(2):
            layers = script.critic_layers(algorithm.critic, member)
            assert [tuple(w.shape) for w, _ in layers] == critic_shapes
            assert [tuple(b.shape) for _, b in layers] == [(shape[0],) for shape in critic_shapes]
        draw = script.our_draw(algorithm, batch)
        weights = sum(w.numel() + b.numel() for m in range(2) for w, b in script.critic_layers(algorithm.critic, m))
        assert draw["critics' gradient"].shape == (weights,)
        assert draw["actor's gradient"].shape == (
            sum(w.numel() + b.numel() for w, b in script.actor_layers(algorithm.actor)),
        )
        assert torch.isfinite(torch.as_tensor(draw["critics' gradient"])).all()


def test_the_evaluation_split_runs_the_examples_collector_and_both_loops_to_the_same_returns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It builds the collector as the examples do, so a change to that builder's arguments breaks it here
    # rather than on the next lent GPU, where it runs (`gpu_session.sh evaluation-time`).
    evaluation_time = load_benchmark("evaluation_time", monkeypatch)
    flags = ["--task", "InvertedPendulum-v4", "--test-num", "2", "--rounds", "1", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["evaluation_time.py", *flags])
    evaluation_time.main()
    printed = capsys.readouterr().out
    assert "2 episodes" in printed and "both loops return" in printed, printed
    assert "ours ÷ Tianshou's loop:" in printed


@pytest.mark.parametrize("bug", [None, "td3-min-in-actor", "rebrac-no-critic-penalty", "iql-mean-not-expectile"])
def test_the_continuous_algorithms_agree_with_d3rlpy_and_planted_bugs_are_caught(
    bug: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where d3rlpy is installed beside the project (it is not a dependency): TD3+BC, ReBRAC, IQL and BC
    on shared weights give d3rlpy's losses and gradients, and a planted mistake breaks exactly its rows."""
    pytest.importorskip("d3rlpy")
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    import d3rlpy_agreement_continuous as agreement
    import torch

    from offline_rl.algorithms.iql import IQL
    from offline_rl.algorithms.rebrac import ReBRAC
    from offline_rl.algorithms.td3_bc import TD3BC

    for cls, name in ((TD3BC, "actor_loss"), (ReBRAC, "penalized_target"), (IQL, "value_loss")):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # undone after the test, planted or not
    if bug is not None:
        agreement.plant(bug)
    torch.manual_seed(0)  # the networks `python benchmarks/d3rlpy_agreement_continuous.py` compares
    batch = agreement.make_batch()
    rows = [*agreement.td3_bc_case(batch), *agreement.rebrac_case(batch, True), *agreement.iql_case(batch)]
    rows += agreement.bc_case(batch)
    differing = {row.case.split(" (")[0] for row in rows if not row.agrees}
    expected = {None: set(), "td3-min-in-actor": {"TD3+BC"}, "rebrac-no-critic-penalty": {"ReBRAC"}}
    assert differing == expected.get(bug, {"IQL"})
