"""A trained policy as one file that runs without offline_rl or Tianshou: the step from a paper's
table to a robot, a game server or a colleague's C++.

Two formats, chosen by the file's suffix (`EXPORT_FORMATS`):
- `.onnx`: ONNX, for onnxruntime, TensorRT, OpenVINO, C++ or a browser; written by torch's ONNX
  exporter, which needs `onnx` and `onnxscript` (this project's `[onnx]` extra, which adds the
  `onnxruntime` the export is checked with).
- `.pt2`: a `torch.export` program; `torch.export.load(path).module()` runs it with torch alone.
TorchScript, the other format d3rlpy writes, is not offered: torch 2.13 deprecates it (`torch.jit.script`
warns so and points to `torch.export`).

The file maps a batch of observations, as the evaluation env gives them, to the actions the run's
evaluation takes: a SAC/CQL actor's Gaussian mean squashed by tanh and scaled to the env's action
bounds; the greedy action of a Q or quantile network (no ε). Its batch size is free. Input dtypes
are the networks' own: float32 vectors, or the uint8 frame stacks of Atari (scaled inside).

An export is checked before it is kept: the written file is loaded back and run on observations
the caller gives (ideally the env's own), and its actions must be the Tianshou policy's evaluation
actions, up to float rounding; a file that does not act so is removed, and the error says by how much.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from offline_rl.algorithms.export.acting import (
    DeterministicActorPolicy,
    GreedyDiscretePolicy,
    acting_module,
    evaluation_actions,
)
from offline_rl.core import VERSION
from offline_rl.core.errors import OfflineRLError, OfflineRLWarning
from offline_rl.core.files import atomic_path

ModuleType = TypeVar("ModuleType", bound=nn.Module)

EXPORT_FORMATS = {".onnx": "ONNX", ".pt2": "torch.export program"}
"""File suffix → format written."""

ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
"""What an ONNX export imports: torch's exporter needs the first two, its check the third."""

CONTINUOUS_TOLERANCE = 1e-4
"""Largest difference allowed between the file's and the policy's continuous actions, as a share of
the widest action range (float rounding in another runtime is ~1e-7 of it)."""


class QFilterNotExportedWarning(OfflineRLWarning):
    """An exported policy evaluates with a Q filter, which the file cannot hold: it plays the mean action."""


@dataclass(frozen=True)
class ExportReport:
    """What was written, and how closely it acts as the policy it was made from."""

    path: Path
    format: str
    checked_on: int
    max_difference: float | None
    """Continuous actions: the largest difference, file against policy."""
    metadata: dict[str, str]
    """What the file says of itself (`file_metadata`)."""
    checked_against: str = "the policy's evaluation"
    """What its actions were compared with: the policy's mean action where the evaluation is Q-filtered."""

    @property
    def input(self) -> str:
        return f"obs {self.metadata['obs']}"

    @property
    def output(self) -> str:
        return f"action {self.metadata['action']}"

    def describe(self) -> str:
        agreement = (
            f"max |difference| {self.max_difference:.1e}"
            if self.max_difference is not None
            else "the same greedy actions"
        )
        return (
            f"{self.format} {self.path}: {self.input} -> {self.output}; on {self.checked_on} observations it acts "
            f"as {self.checked_against} does ({agreement})"
        )


def export_format(path: str | os.PathLike[str], *, flag: str = "--export-policy") -> str:
    """The format a file name asks for; a one-line error for another suffix."""
    suffix = Path(path).suffix.lower()
    if suffix not in EXPORT_FORMATS:
        expected = " or ".join(f"{end} ({name})" for end, name in EXPORT_FORMATS.items())
        raise OfflineRLError(f"{flag} {path}: expected a file name ending in {expected}")
    return EXPORT_FORMATS[suffix]


def require_export_tools(path: str | os.PathLike[str], *, flag: str = "--export-policy") -> None:
    """One line now, before any checkpoint is read, when the file's format cannot be written here."""
    if export_format(path, flag=flag) != EXPORT_FORMATS[".onnx"]:
        return

    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise OfflineRLError(
            f"{flag} {path}: ONNX export needs {', '.join(missing)}: pip install {' '.join(missing)} (this "
            "project's [onnx] extra), or write a torch.export program (.pt2)"
        )


def export_policy(
    policy: Any,
    observations: np.ndarray,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, str] | None = None,
) -> ExportReport:
    """Write `policy`'s evaluation behaviour to `path` (its suffix picks the format), checked on
    `observations` (a batch, at least two, as the evaluation env gives them) against the policy itself.

    The file carries a description of itself (`file_metadata` reads it): what it takes and gives,
    how it acts, its producer, and `metadata` (the examples add the task, the checkpoint and the
    evaluation env's gymnasium spec, from which `gym.make` rebuilds that env, wrappers included)."""

    fmt = export_format(path)
    if len(observations) < 2:
        raise ValueError("export_policy needs at least two observations: the file's batch size stays free")
    module = _portable(acting_module(policy))
    example = torch.as_tensor(observations).to(_input_dtype(observations))
    # The reference is the policy's own evaluation, computed as the file computes: on the CPU in float32.
    # A policy on a GPU multiplies in TF32 there (the CUDA default of the examples): 10-bit mantissas,
    # whose rounding can move actions by more than the check allows and so fail a correct file.
    with _float32_products():
        expected = evaluation_actions(_portable(policy), observations)
        with torch.no_grad():
            output = module(example[:2]).numpy()
    description = {
        "producer": f"offline_rl {VERSION}",
        "obs": _layout(example.numpy()),
        "action": _layout(output),
        "acting": _acting(module),
        **dict(metadata or {}),
    }
    final = Path(path).expanduser()
    with atomic_path(final) as tmp:
        if fmt == EXPORT_FORMATS[".onnx"]:
            run = _write_onnx(module, example, tmp, description, final=final)
        else:
            run = _write_program(module, example, tmp, description)
        actions = run(example.numpy())
        difference = _check_actions(module, example, actions, expected, policy, final)
    checked_against = "the policy's evaluation"
    if getattr(policy, "q_filter_samples", 0):
        checked_against = "the policy's mean action"
        warnings.warn(
            f"{final}: the policy evaluates with a Q filter of {policy.q_filter_samples} samples (--eval-q-filter), "
            "which needs its critics and random draws; the file plays the mean action those samples are drawn around",
            QFilterNotExportedWarning,
            stacklevel=2,
        )
    return ExportReport(
        path=final,
        format=fmt,
        checked_on=len(observations),
        max_difference=difference,
        metadata=description,
        checked_against=checked_against,
    )


METADATA_FILE = "offline_rl.json"
"""Where a .pt2 file keeps its description (an extra file of the archive); ONNX keeps it in the
model's metadata properties."""


def file_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The description an exported file carries. Without offline_rl: onnxruntime's
    `InferenceSession(path).get_modelmeta().custom_metadata_map`, or for a .pt2 file
    `torch.export.load(path, extra_files={"offline_rl.json": ""})`, which fills that dict with JSON."""
    file_path = Path(path)
    if export_format(file_path, flag="file") == EXPORT_FORMATS[".onnx"]:
        import onnxruntime  # heavy (onnxruntime): loaded only when used

        session = onnxruntime.InferenceSession(str(file_path), providers=["CPUExecutionProvider"])
        return dict(session.get_modelmeta().custom_metadata_map)
    extra = {METADATA_FILE: ""}
    with _quiet_exporters(), file_path.open("rb") as file:
        torch.export.load(file, extra_files=extra)
    return dict(json.loads(extra[METADATA_FILE] or "{}"))


def _acting(module: nn.Module) -> str:
    """How the file chooses actions, in words, for its description."""
    if isinstance(module, GreedyDiscretePolicy):
        return "the greedy action: argmax over actions of the Q-value (the mean over quantiles); no epsilon"
    assert isinstance(module, DeterministicActorPolicy)
    if not module.scaling:
        return "tanh of the actor's Gaussian mean, in [-1, 1]"
    low, high = module.low.tolist(), module.high.tolist()
    return f"tanh of the actor's Gaussian mean, mapped from [-1, 1] onto the bounds low {low}, high {high}"


def _layout(array: np.ndarray) -> str:
    """'float32 (batch, 17)': a batch's element type and shape, its first axis free."""
    return f"{array.dtype} ({', '.join(['batch', *map(str, array.shape[1:])])})"


def _input_dtype(observations: np.ndarray) -> torch.dtype:
    """uint8 frames stay bytes (the network scales them); everything else is float32, the networks' type."""
    return torch.uint8 if np.asarray(observations).dtype == np.uint8 else torch.float32


def _portable(module: ModuleType) -> ModuleType:
    """A CPU copy in eval mode with plainly laid-out weights that ask for no gradient: channels-last
    convolution weights (how the Atari network trains fastest) make `torch.export.save` warn about
    their storage."""
    copied = copy.deepcopy(module).cpu().eval()
    with torch.no_grad():
        for parameter in copied.parameters():
            parameter.data = parameter.data.contiguous()
            parameter.requires_grad_(False)  # a loaded program then gives plain tensors: `.numpy()` works
    return copied


@contextlib.contextmanager
def _float32_products() -> Iterator[None]:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def _batch_free() -> tuple[dict[int, Any]]:
    return ({0: torch.export.Dim("batch")},)


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """Torch's exporters print their progress and log notes on their own internals (operators of
    torchvision, not installed; the name of a temporary file): none of it is about this export."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _write_program(
    module: nn.Module, example: torch.Tensor, path: Path, description: dict[str, str]
) -> Callable[[np.ndarray], np.ndarray]:
    with _quiet_exporters():
        program = torch.export.export(module, (example,), dynamic_shapes=_batch_free())
        with path.open("wb") as file:  # a file object: torch.export names files *.pt2, and this is a temporary
            torch.export.save(program, file, extra_files={METADATA_FILE: json.dumps(description, indent=1)})
        with path.open("rb") as file:
            loaded = torch.export.load(file).module()

    def run(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return loaded(torch.as_tensor(obs)).numpy()

    return run


def _write_onnx(
    module: nn.Module, example: torch.Tensor, path: Path, description: dict[str, str], *, final: Path
) -> Callable[[np.ndarray], np.ndarray]:
    """`final`: the path the temporary `path` becomes, for the message of a failed export."""
    import onnxruntime  # heavy (onnxruntime): loaded only when used

    with _quiet_exporters():
        try:
            program = torch.onnx.export(
                module,
                (example,),
                dynamo=True,
                input_names=["obs"],
                output_names=["action"],
                dynamic_shapes=_batch_free(),
                verbose=False,
            )
        except ImportError as error:  # an onnxscript older than this torch's exporter (0.5 with torch 2.13)
            raise OfflineRLError(
                f"{final}: torch {torch.__version__}'s ONNX exporter cannot use the onnxscript "
                f"installed ({error}); pip install -U onnxscript, or write a .pt2 file"
            ) from None
        program.model.metadata_props.update(description)
        program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(obs: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(["action"], {"obs": obs})[0])

    return run


def _check_actions(
    module: nn.Module,
    example: torch.Tensor,
    actions: np.ndarray,
    expected: np.ndarray,
    policy: Any,
    path: Path,
) -> float | None:
    """The largest continuous difference (None for discrete actions); an error when the file does not
    act as the policy does."""
    if isinstance(module, GreedyDiscretePolicy):
        with torch.no_grad():
            values = module.action_values(example).numpy().astype(np.float64)
        tolerance = 1e-5 * max(1.0, float(np.abs(values).max()))

        def not_greedy(chosen: np.ndarray) -> np.ndarray:
            # An index other than argmax's is still greedy where its value ties the best to float rounding.
            taken = values[np.arange(len(values)), np.asarray(chosen).reshape(-1).astype(np.int64)]
            return values.max(axis=1) - taken > tolerance

        wrong = int((not_greedy(actions) | not_greedy(expected)).sum())
        if wrong:
            raise OfflineRLError(
                f"{path}: not written, its greedy actions differ from the policy's on {wrong} of {len(values)} "
                "observations"
            )
        return None
    difference = float(np.abs(actions.astype(np.float64) - np.asarray(expected, dtype=np.float64)).max())
    space = policy.action_space
    width = float(np.max(space.high - space.low)) if np.all(np.isfinite(space.high - space.low)) else 2.0
    if not difference <= CONTINUOUS_TOLERANCE * max(1.0, width):
        raise OfflineRLError(
            f"{path}: not written, its actions differ from the policy's by up to {difference:.3g} "
            f"(allowed: {CONTINUOUS_TOLERANCE * max(1.0, width):.3g})"
        )
    return difference
