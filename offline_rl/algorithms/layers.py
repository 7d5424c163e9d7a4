"""The dense layers every vector network here is made of, and their CPU products.

`relu_mlp` builds the ReLU multi-layer perceptron of the actor, the quantile heads and the exported
policies, so their state-dict layouts stay identical (`0.weight`, `2.weight`, ...).

torch sends float32 CPU matrix products to its BLAS (MKL in the PyPI wheels), which on AMD processors
takes a generic code path; oneDNN, which torch already ships for its convolutions, runs the same products
much faster there, and a CPU update spends most of its time in them. `--cpu-products auto` (the default)
routes the networks' hidden layers through oneDNN on AMD processors and keeps torch's BLAS elsewhere,
where MKL has its own fast path; `blas` and `onednn` choose explicitly. The arithmetic is the same float32
FMA; only the summation order differs.

The forward product and the input gradient go through `torch.ops.mkldnn._linear_pointwise`, the weight
gradient through it or `aten.mkldnn_linear_backward_weights`. Both are private, so the path is checked
once per process against `F.linear`, forward and backward, and any failure or mismatch falls back to
BLAS with the reason kept for the run's start line. Under `torch.compile`, on GPUs, for other dtypes,
for lower-precision `--matmul-precision` and for small layers (`SMALL_PRODUCT`, where oneDNN's per-call
setup outweighs its arithmetic), layers run `F.linear`, as `nn.Linear` does.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from offline_rl.core.arithmetic import CPU_PRODUCTS
from offline_rl.core.compat import in_vmap

# Layers whose product has fewer multiply-adds (rows × inputs × outputs) stay with torch's BLAS: a oneDNN
# call has a fixed setup cost, more than its faster arithmetic saves on a small layer; the two break
# even around this size, forward and backward together (`benchmarks/cql_sac_profile.py`).
SMALL_PRODUCT = 4_000_000
# torch < 2.3 has no torch.compiler.is_compiling; this project compiles only on CUDA, where `dense` never
# takes the oneDNN path, so there "never compiling" is safe.
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
_is_exporting = getattr(torch.compiler, "is_exporting", lambda: False)
_state: dict[str, str] = {"choice": "auto"}
PROC_CPUINFO = Path("/proc/cpuinfo")


def use_cpu_products(choice: str) -> None:
    """Select the library of the networks' CPU products for this process ('auto', 'onednn' or 'blas').

    Process-wide, as torch's own `set_float32_matmul_precision` is: runs set it once at start."""
    if choice not in CPU_PRODUCTS:
        raise ValueError(f"cpu products must be one of {CPU_PRODUCTS}, got {choice!r}")
    _state["choice"] = choice


def onednn_products_active() -> bool:
    """Whether CPU float32 `dense` layers run through oneDNN in this process. Asked by every `dense`
    call, so it tests the conditions without composing `_blocker`'s reason."""
    return _onednn_chosen() and torch.get_float32_matmul_precision() == "highest" and onednn_blocker() is None


def describe_cpu_products() -> str:
    """For the start of a CPU run: which library multiplies the networks' matrices, and why. Said by
    algorithms holding a module marked `USES_CPU_PRODUCTS` (a module whose layers call `dense`)."""
    blocker = _blocker()
    if blocker is not None:
        return f"matrix products: torch's BLAS ({blocker})"
    if _state["choice"] == "auto":
        return "matrix products: oneDNN (an AMD processor; --cpu-products blas: torch's BLAS)"
    return "matrix products: oneDNN (--cpu-products blas: torch's BLAS)"


def bf16_products_hint() -> str:
    """For a CPU run's start line, where float32 products leave the processor's AMX units idle: how to
    use them. Said by the CQL-SAC critics (`BF16_PRODUCTS_GAIN`); discrete CQL's update is its
    convolutions', which `--matmul-precision` leaves in float32, and ran no faster in bf16."""
    if torch.get_float32_matmul_precision() != "highest" or not _has_amx():
        return ""
    return "; float32 products (--matmul-precision medium: bf16 on this processor's AMX units, faster)"


def _has_amx() -> bool:
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)  # torch >= 2.3
    return bool(probe is not None and probe())


@functools.cache
def cpu_vendor(cpuinfo: Path = PROC_CPUINFO) -> str:
    """'AMD', 'Intel', or '' where the processor's maker cannot be told (read once per process)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            text = lines.read(8192)  # the first processor's block names the vendor
    except OSError:
        text = platform.processor()  # Windows: "AMD64 Family 25 Model 17 Stepping 1, AuthenticAMD"
    for name, vendor in (("AuthenticAMD", "AMD"), ("GenuineIntel", "Intel")):
        if name in text:
            return vendor
    return ""


def _onednn_chosen() -> bool:
    """Whether the choice (`use_cpu_products`) asks for oneDNN on this processor: `auto` does on AMD's."""
    choice = _state["choice"]
    return choice == "onednn" or (choice == "auto" and cpu_vendor() == "AMD")


def _blocker() -> str | None:
    if not _onednn_chosen():
        if _state["choice"] == "blas":
            return "--cpu-products blas"
        why = {"Intel": "an Intel processor, where MKL multiplies faster"}.get(
            cpu_vendor(), "oneDNN is the faster library on AMD processors only"
        )
        return f"{why}; --cpu-products onednn: oneDNN"
    precision = torch.get_float32_matmul_precision()
    if precision != "highest":
        return f"--matmul-precision {precision}"
    return onednn_blocker()


@functools.cache
def onednn_blocker() -> str | None:
    """Why oneDNN cannot run the layers in this torch build, or None (checked once per process)."""
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return "this torch build lacks torch.ops.mkldnn._linear_pointwise"
    generator = torch.Generator().manual_seed(0)
    many, wide = _Dense.MANY_ROWS, _Dense.WIDE_INPUT
    # every weight-gradient path: few rows in either weight layout, many rows of wide inputs
    for rows, width, transposed in ((37, 5, False), (37, 5, True), (many, wide, False)):
        x = torch.randn(rows, width, generator=generator, requires_grad=True)
        stored = torch.randn(*((width, 11) if transposed else (11, width)), generator=generator, requires_grad=True)
        b = torch.randn(11, generator=generator, requires_grad=True)
        upstream = torch.randn(rows, 11, generator=generator)
        weight = stored.t() if transposed else stored
        try:
            got = _Dense.apply(x, weight, b, True)
            got_grads = torch.autograd.grad(got, (x, stored, b), upstream)
        except Exception as error:  # an operator this build does not support as used here
            return f"oneDNN's linear operators failed their check: {type(error).__name__}"
        expected = F.linear(x, weight, b).relu()
        expected_grads = torch.autograd.grad(expected, (x, stored, b), upstream)
        pairs = [(got, expected), *zip(got_grads, expected_grads, strict=True)]
        if not all(torch.allclose(a, e, rtol=1e-4, atol=1e-4) for a, e in pairs):
            return "oneDNN's linear operators disagreed with F.linear in their check"
    return None


def dense(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, relu: bool) -> torch.Tensor:
    """x @ weight.T + bias, then ReLU if `relu`: `torch.nn.functional.linear`'s layout (weight (out, in)),
    through oneDNN where it applies (2-D float32 on CPU, `SMALL_PRODUCT` or more multiply-adds), through
    `F.linear` elsewhere (and under `torch.func.vmap`, a seed batch's update, which batches `F.linear`)."""
    if (
        x.device.type == "cpu"
        and x.dim() == 2
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and not _traced()
        and not (in_vmap(x) or in_vmap(weight))
        and x.shape[0] * weight.shape[0] * weight.shape[1] >= SMALL_PRODUCT
        and torch.backends.mkldnn.enabled
        and onednn_products_active()
    ):
        return _Dense.apply(x, weight, bias, relu)
    y = F.linear(x, weight, bias)
    return y.relu_() if relu else y


def _traced() -> bool:
    """Whether `torch.compile` or `torch.export` (and the ONNX export built on it) is tracing: they record
    `F.linear`, whatever the rows, and a row-count test here would tie an exported policy's batch size."""
    return _is_compiling() or _is_exporting()


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """x @ weight.T (+ bias), activation fused: oneDNN's inner product, weight (out, in)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], "")


class _Dense(torch.autograd.Function):
    """x @ weight.T + bias (ReLU optional) with all three products in oneDNN.

    Layouts were chosen by timing each: the forward weight is made contiguous (the critics' weights
    are stored (in, out) and arrive as transposed views, which oneDNN multiplies more slowly than a
    copy costs); the input gradient multiplies by the weight as it lies. The weight gradient is
    produced in the memory layout of the weight it updates (no transposing copy after it), from the
    transposed views of x and the output gradient; for many rows of wide inputs (`MANY_ROWS`,
    `WIDE_INPUT`: the critics' hidden layers) oneDNN's own weight-gradient operator is faster, even
    counting the copies of both operands into its layout, and slower for narrow first layers; that
    operator also gives the bias gradient, which spares a pass over the output gradient. The ReLU
    is torch's, not the one oneDNN could fuse into the product: that one maps NaN to 0, so a
    network with a NaN weight would train on silently instead of the run stopping on its
    non-finite loss.
    """

    WIDE_INPUT = 64
    MANY_ROWS = 2048

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, relu: bool) -> torch.Tensor:
        y = _linear(x, weight.contiguous(), bias, "none")
        if relu:  # torch's ReLU: oneDNN's fused one turns NaN into 0, hiding a diverged network
            y = y.relu_()
        ctx.relu = relu
        ctx.save_for_backward(x, weight, y if relu else None)
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, y = ctx.saved_tensors
        # ReLU's own backward, from its output
        grad_pre = torch.ops.aten.threshold_backward(grad_y, y, 0.0) if ctx.relu else grad_y.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = _linear(grad_pre, weight.t(), None, "none")
        if ctx.needs_input_grad[1]:
            if x.shape[0] >= _Dense.MANY_ROWS and x.shape[1] >= _Dense.WIDE_INPUT:
                # the bias gradient comes from the same primitive, without another pass over grad_pre
                with_bias = ctx.needs_input_grad[2]
                grad_weight, grad_bias = torch.ops.aten.mkldnn_linear_backward_weights(
                    grad_pre.to_mkldnn(), x.to_mkldnn(), weight, with_bias
                )
                grad_bias = grad_bias if with_bias else None
            elif weight.is_contiguous():
                grad_weight = _linear(grad_pre.t(), x.t(), None, "none")
            else:
                grad_weight = _linear(x.t(), grad_pre.t(), None, "none").t()
        if ctx.needs_input_grad[2] and grad_bias is None:
            grad_bias = grad_pre.sum(dim=0)
        return grad_x, grad_weight, grad_bias, None


class ReluMLP(nn.Sequential):
    """Linear, ReLU, ..., Linear, as `nn.Sequential` holds and saves them; each Linear with the ReLU
    after it runs as one `offline_rl.algorithms.layers.dense` layer (oneDNN on AMD CPUs, `F.linear` elsewhere)."""

    USES_CPU_PRODUCTS = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = list(self)
        for index in range(0, len(layers), 2):
            linear = layers[index]
            assert isinstance(linear, nn.Linear)
            x = dense(x, linear.weight, linear.bias, relu=index + 1 < len(layers))
        return x


def relu_mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> ReluMLP:
    """Linear → ReLU for each hidden width, then a linear output layer."""
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_sizes:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out_dim))
    return ReluMLP(*layers)
