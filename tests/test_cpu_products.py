"""The networks' CPU products through oneDNN (`offline_rl.algorithms.layers`): the same layer as
`F.linear` (+ ReLU), forward and backward, used where it applies and only there."""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_cql_sac_training import build, narrow_band_buffer, small_config, train
from tianshou.algorithm.algorithm_base import policy_within_training_step
from torch.utils._python_dispatch import TorchDispatchMode

from offline_rl.algorithms import layers as cpu_products
from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql.networks import QuantileNatureCNN
from offline_rl.algorithms.layers import cpu_vendor, dense, describe_cpu_products, onednn_blocker, use_cpu_products
from offline_rl.data.transitions import make_replay_buffer
from offline_rl.runs.config import TorchConfig, resolve_matmul_precision
from offline_rl.runs.session import configure_torch

ONEDNN_OPS = {"mkldnn._linear_pointwise", "aten.mkldnn_linear_backward_weights"}


DEFAULT_SMALL_PRODUCT = cpu_products.SMALL_PRODUCT


@pytest.fixture(autouse=True)
def restore_the_process_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every layer of these tests, however small, takes oneDNN unless a test says otherwise: the
    processor reads as an AMD one, where `auto` picks oneDNN, whatever machine runs the tests."""
    monkeypatch.setattr(cpu_products, "SMALL_PRODUCT", 0)
    monkeypatch.setattr(cpu_products, "cpu_vendor", lambda: "AMD")
    precision = torch.get_float32_matmul_precision()
    use_cpu_products("onednn")
    yield
    use_cpu_products("auto")
    torch.set_float32_matmul_precision(precision)


class OperatorNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[str(func._overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def operators_of(step: Callable[[], Any]) -> collections.Counter[str]:
    recorder = OperatorNames()
    with recorder:
        step()
    return recorder.seen


def layer_with_gradients(
    width: int = 200, *, rows: int = 300, stored_transposed: bool = False, relu: bool = True, detached: bool = False
) -> tuple[torch.Tensor, ...]:
    """dense(x, weight, b) and the gradients of a fixed random upstream gradient. The weight is held
    as nn.Linear holds it, (out, in), or as the critics store theirs, (in, out), handed in transposed."""
    generator = torch.Generator().manual_seed(width + rows)
    x = torch.randn(rows, width, generator=generator, requires_grad=True)
    shape = (width, 48) if stored_transposed else (48, width)
    stored = torch.randn(*shape, generator=generator, requires_grad=not detached)
    b = torch.randn(48, generator=generator, requires_grad=not detached)
    upstream = torch.randn(rows, 48, generator=generator)
    y = dense(x, stored.t() if stored_transposed else stored, b, relu=relu)
    inputs = (x,) if detached else (x, stored, b)
    return (y, *torch.autograd.grad(y, inputs, upstream))


def reference(**layer: Any) -> tuple[torch.Tensor, ...]:
    use_cpu_products("blas")
    try:
        return layer_with_gradients(**layer)
    finally:
        use_cpu_products("onednn")


def test_this_torch_build_runs_the_networks_products_in_onednn() -> None:
    """The CI's torch must keep the fast path: a torch that lost the operator would fall back
    silently, and only this test would notice."""
    assert onednn_blocker() is None
    assert describe_cpu_products() == "matrix products: oneDNN (--cpu-products blas: torch's BLAS)"


LAYERS = {
    "narrow input, nn.Linear layout": {"width": 5},
    "narrow input, critic layout": {"width": 5, "stored_transposed": True},
    "wide input, nn.Linear layout": {"width": 200},
    "wide input, critic layout": {"width": 200, "stored_transposed": True},
    "many rows of a wide input (oneDNN's weight-gradient operator)": {"width": 64, "rows": 2100},
    "many rows, critic layout": {"width": 64, "rows": 2100, "stored_transposed": True},
    "no ReLU (an output layer)": {"width": 200, "relu": False},
    "critics held constant (the actor's loss)": {"width": 200, "stored_transposed": True, "detached": True},
}


@pytest.mark.parametrize("layer", LAYERS.values(), ids=LAYERS.keys())
def test_the_onednn_layer_equals_f_linear_forward_and_backward(layer: dict[str, Any]) -> None:
    fast = layer_with_gradients(**layer)
    slow = reference(**layer)
    assert len(fast) == len(slow) == (2 if layer.get("detached") else 4)
    for got, expected in zip(fast, slow, strict=True):
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)
    if layer.get("relu", True):
        assert (fast[0] == 0).any() and (fast[0] > 0).any()  # the ReLU's both sides were exercised
    else:
        assert (fast[0] < 0).any()


def test_many_rows_take_their_bias_gradient_from_the_weight_gradient_operator() -> None:
    """One pass fewer over the output gradient of a critic's hidden layer (7936 rows in an update)."""
    seen = operators_of(lambda: layer_with_gradients(64, rows=2100, stored_transposed=True))
    assert seen["aten.mkldnn_linear_backward_weights"] == 1
    assert seen["aten.sum"] == 0


def test_a_nan_weight_reaches_the_output_as_with_f_linear() -> None:
    """Divergence detection needs it: oneDNN's fused ReLU would map the NaN to 0."""
    x = torch.ones(3, 2)
    weight = torch.tensor([[float("nan"), 1.0], [1.0, 1.0]])
    assert set(operators_of(lambda: dense(x, weight, torch.zeros(2), relu=True))) >= {"mkldnn._linear_pointwise"}
    assert dense(x, weight, torch.zeros(2), relu=True)[:, 0].isnan().all()


def test_the_choice_decides_which_library_runs_the_products() -> None:
    def layer() -> None:
        layer_with_gradients(64, rows=2100)

    onednn = operators_of(layer)
    assert set(onednn) >= ONEDNN_OPS and "aten.addmm" not in onednn and "aten.mm" not in onednn
    use_cpu_products("blas")
    blas = operators_of(layer)
    assert not ONEDNN_OPS & set(blas) and blas["aten.addmm"] == 1 and blas["aten.mm"] == 2
    assert describe_cpu_products() == "matrix products: torch's BLAS (--cpu-products blas)"


def test_small_layers_stay_with_torch_s_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below `SMALL_PRODUCT` multiply-adds oneDNN's per-call setup costs more than it saves."""
    monkeypatch.setattr(cpu_products, "SMALL_PRODUCT", DEFAULT_SMALL_PRODUCT)
    assert 300 * 200 * 48 < DEFAULT_SMALL_PRODUCT <= 2100 * 64 * 48
    small = operators_of(lambda: layer_with_gradients(200, rows=300))
    assert not ONEDNN_OPS & set(small) and small["aten.addmm"] == 1
    assert set(operators_of(lambda: layer_with_gradients(64, rows=2100))) >= ONEDNN_OPS
    assert describe_cpu_products().startswith("matrix products: oneDNN")


def test_lower_matmul_precision_is_left_to_torch() -> None:
    """--matmul-precision medium asks torch for bf16 arithmetic; oneDNN's float32 would ignore it."""
    torch.set_float32_matmul_precision("medium")
    assert not ONEDNN_OPS & set(operators_of(lambda: layer_with_gradients(64, rows=2100)))
    assert describe_cpu_products() == "matrix products: torch's BLAS (--matmul-precision medium)"


@pytest.mark.parametrize(
    ("vendor", "line"),
    [
        ("AMD", "matrix products: oneDNN (an AMD processor; --cpu-products blas: torch's BLAS)"),
        (
            "Intel",
            "matrix products: torch's BLAS (an Intel processor, where MKL multiplies faster; "
            "--cpu-products onednn: oneDNN)",
        ),
        (
            "",
            "matrix products: torch's BLAS (oneDNN is the faster library on AMD processors only; "
            "--cpu-products onednn: oneDNN)",
        ),
    ],
)
def test_auto_takes_onednn_on_amd_processors_only(monkeypatch: pytest.MonkeyPatch, vendor: str, line: str) -> None:
    """On Intel processors MKL's own path beats oneDNN on the same update."""
    monkeypatch.setattr(cpu_products, "cpu_vendor", lambda: vendor)
    configure_torch("cpu", TorchConfig(threads=1), seed=0)
    assert TorchConfig().cpu_products == "auto"
    assert describe_cpu_products() == line
    seen = set(operators_of(lambda: layer_with_gradients(64, rows=2100)))
    onednn_ran, blas_ran = seen >= ONEDNN_OPS, not seen & ONEDNN_OPS and "aten.addmm" in seen
    assert (onednn_ran, blas_ran) == ((True, False) if vendor == "AMD" else (False, True))
    use_cpu_products("onednn")  # an explicit choice holds on any processor
    assert set(operators_of(lambda: layer_with_gradients(64, rows=2100))) >= ONEDNN_OPS
    assert describe_cpu_products() == "matrix products: oneDNN (--cpu-products blas: torch's BLAS)"


@pytest.mark.parametrize(
    ("first_lines", "vendor"),
    [
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n", "AMD"),
        ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n", "Intel"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n", ""),  # an Arm server's
    ],
)
def test_the_vendor_comes_from_proc_cpuinfo(tmp_path: Path, first_lines: str, vendor: str) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(first_lines + "flags\t: fpu vme\n\n" * 200)
    assert cpu_vendor.__wrapped__(cpuinfo) == vendor


def test_without_proc_cpuinfo_the_vendor_comes_from_the_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_products.platform, "processor", lambda: "AMD64 Family 25 Model 17 Stepping 1, AuthenticAMD")
    assert cpu_vendor.__wrapped__(tmp_path / "absent") == "AMD"
    monkeypatch.setattr(cpu_products.platform, "processor", lambda: "")
    assert cpu_vendor.__wrapped__(tmp_path / "absent") == ""


@pytest.mark.parametrize("amx", [True, False])
def test_a_cql_sac_run_on_a_processor_with_amx_says_how_to_use_it(monkeypatch: pytest.MonkeyPatch, amx: bool) -> None:
    """bf16 products run the CQL-SAC update faster on AMX units; discrete CQL's update is its
    convolutions' and gains nothing, so its line stays as it was."""
    monkeypatch.setattr(cpu_products, "_has_amx", lambda: amx)
    hint = "; float32 products (--matmul-precision medium: bf16 on this processor's AMX units, faster)"
    sac = build(small_config())
    space = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    discrete = CQLQRDQN.build(space, gym.spaces.Discrete(3), DiscreteCQLConfig(num_quantiles=8))
    assert sac.update_path().endswith(describe_cpu_products() + (hint if amx else ""))
    assert discrete.update_path().endswith(describe_cpu_products())
    torch.set_float32_matmul_precision("medium")
    assert sac.update_path().endswith("matrix products: torch's BLAS (--matmul-precision medium)")


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu products must be one of"):
        use_cpu_products("mkl")


@pytest.mark.parametrize(
    ("precision", "device", "resolved"),
    [("auto", "cuda", "high"), ("auto", "cuda:1", "high"), ("auto", "cpu", "highest"), ("highest", "cuda", "highest")],
)
def test_auto_precision_is_tf32_on_cuda_and_float32_on_cpu(precision: str, device: str, resolved: str) -> None:
    assert resolve_matmul_precision(precision, device) == resolved


def test_an_auto_precision_run_on_cpu_keeps_onednns_float32_products() -> None:
    configure_torch("cpu", TorchConfig(matmul_precision="auto", threads=1), seed=0)
    assert torch.get_float32_matmul_precision() == "highest"
    assert describe_cpu_products().startswith("matrix products: oneDNN")


def test_tf32_is_the_default_of_the_example_whose_learning_check_covered_it() -> None:
    """CQL-SAC's learning check compared TF32 with float32 (the benchmark page); the
    discrete examples' was not made, so they keep float32 products."""
    from offline_rl.cli.atari_cql import config_from_args as atari_cql_config
    from offline_rl.cli.d4rl_cql import config_from_args as d4rl_cql_config

    assert d4rl_cql_config([]).run.torch.matmul_precision == "auto"
    assert atari_cql_config([]).run.torch.matmul_precision == "highest"
    assert TorchConfig().matmul_precision == "highest"


def test_the_run_setting_selects_the_library() -> None:
    configure_torch("cpu", TorchConfig(cpu_products="blas", threads=1), seed=0)
    assert describe_cpu_products() == "matrix products: torch's BLAS (--cpu-products blas)"
    configure_torch("cpu", TorchConfig(threads=1), seed=0)  # auto, on a processor read as AMD
    assert describe_cpu_products().startswith("matrix products: oneDNN")


def test_cql_sac_trains_the_same_with_either_library() -> None:
    """Same state, same random draws: only the products' summation order differs, so after several
    updates losses and parameters agree to float32 rounding. 160 states x 13 actions scored per
    update reach the critics' many-rows weight-gradient operator."""
    buffer = narrow_band_buffer()
    torch.manual_seed(0)
    algo = build(small_config(critic_width=96, actor_hidden_sizes=[96, 96], with_lagrange=True))
    twin, initial = copy.deepcopy(algo), copy.deepcopy(algo.critic.state_dict())
    torch.manual_seed(1)
    fast: list[Any] = []
    assert set(operators_of(lambda: fast.extend(train(algo, buffer, 6, batch_size=160)))) >= ONEDNN_OPS
    use_cpu_products("blas")
    torch.manual_seed(1)
    slow = train(twin, buffer, 6, batch_size=160)
    for got, expected in zip(fast, slow, strict=True):
        torch.testing.assert_close(
            torch.tensor([got.critic_loss, got.actor_loss, got.cql_gap]),
            torch.tensor([expected.critic_loss, expected.actor_loss, expected.cql_gap]),
            rtol=1e-4,
            atol=1e-5,
        )
    for (name, got), (_, expected) in zip(algo.named_parameters(), twin.named_parameters(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=name)
    assert all(not torch.equal(value, algo.critic.state_dict()[name]) for name, value in initial.items())


def test_discrete_cql_on_the_nature_cnn_trains_the_same_with_either_library() -> None:
    """The quantile head's layers (3136 -> 512 -> A x quantiles on Atari frames) take the same path."""
    rng = np.random.default_rng(0)
    size = 200
    buffer = make_replay_buffer(
        obs=rng.integers(0, 256, (size, 4, 36, 36), dtype=np.uint8),
        act=rng.integers(0, 3, size),
        rew=rng.normal(size=size).astype(np.float32),
        terminated=rng.random(size) < 0.05,
        truncated=np.zeros(size, bool),
        obs_next=rng.integers(0, 256, (size, 4, 36, 36), dtype=np.uint8),
    )
    space = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    torch.manual_seed(0)
    algo = CQLQRDQN.build(space, gym.spaces.Discrete(3), DiscreteCQLConfig(num_quantiles=8, target_update_freq=2))
    assert isinstance(algo.model, QuantileNatureCNN)
    twin = copy.deepcopy(algo)

    def losses(model: CQLQRDQN) -> list[float]:
        model.process_buffer(buffer)
        torch.manual_seed(1)
        with policy_within_training_step(model.policy):
            return [model.update(buffer, 16).loss for _ in range(5)]

    fast: list[float] = []
    assert set(operators_of(lambda: fast.extend(losses(algo)))) >= {"mkldnn._linear_pointwise"}
    use_cpu_products("blas")
    np.testing.assert_allclose(fast, losses(twin), rtol=1e-4, atol=1e-5)
    for (name, got), (_, expected) in zip(algo.named_parameters(), twin.named_parameters(), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=name)
    assert algo.update_path().endswith("matrix products: torch's BLAS (--cpu-products blas)")


def test_networks_of_tianshou_leave_the_products_unmentioned() -> None:
    """The line names oneDNN only where our networks run: Tianshou's own call torch's products."""
    from test_tianshou_dropin import pendulum_parts
    from tianshou.algorithm.optim import AdamOptimizerFactory

    from offline_rl import CQL

    policy, critic, _env = pendulum_parts([16])
    optim = AdamOptimizerFactory(lr=1e-3)
    algo = CQL(policy=policy, policy_optim=optim, critic=critic, critic_optim=optim)
    assert algo.update_path() == "updates: eager (the device is cpu; CUDA graphs need CUDA)"
