"""Many seeds in one update: S copies of one algorithm, each with its own weights, optimiser state,
random draws and batches, trained as one batched update.

How: every parameter of the S members is stacked along a leading seed dimension in one *stacked copy*
of the algorithm, and each member's parameter becomes a view of its row, so that the members, which
run folders, evaluations and exports use as single algorithms, always hold the current weights. The
trainer drives the stacked copy; its update draws S batches at once, runs the algorithm's own losses
(`compute_losses`, or each stage's) for all S under `torch.func.vmap`, with the stacked tensors swapped
into the first member's modules, back-propagates the sum of the S losses once (each seed's parameters
receive their own loss's gradient: the seeds share no parameter), and runs the algorithm's own
`apply_gradients` on the stacked copy. Adam, clamps and Polyak updates act element by element, so one
optimiser over stacked tensors is S optimisers; a per-critic gradient norm reduces over each seed's
own critics (`EnsembleCritic.clip_grad_norm_`). On CUDA the batched update is one captured graph, as a
single run's update is (`CountedOfflineAlgorithm.run_step` on the stacked copy).

Buffers every member holds with equal values (the observation normaliser, the update count, a rate
schedule) are one tensor shared by all rather than stacked. A member's `state_dict()` is its own row,
copied out, with its own slice of the optimisers' state: what a single run with its seed saves, and
resumes from; members restored from their checkpoints stack into a batch again.

Equal to separate runs: given the same batches and the same noise, S seeds batched give what S
separate runs give (`tests/test_seed_batch.py`). `randomness="same"` gives every seed the draw a
single run makes from the same generator state, which is how that test feeds them the same noise;
training draws `"different"` noise for each seed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_map

from offline_rl.algorithms.base import CountedOfflineAlgorithm
from offline_rl.algorithms.training_stats import StatisticsWindow, stat_names, stats_from_numbers
from offline_rl.core.compat import swapped_tensors, torch_optimizers


def seed_batch_blocker(algorithm: CountedOfflineAlgorithm) -> str | None:
    """Why `algorithm` cannot train in a seed batch, or None."""
    if algorithm.lr_schedulers:
        return "a learning-rate scheduler of a Tianshou optimiser factory"
    if not all(optimizer.defaults.get("fused") for optimizer in torch_optimizers(algorithm)):
        return "optimisers from Tianshou factories (a seed batch steps offline_rl's fused Adam)"
    return None


class SeedStatistics(StatisticsWindow):  # type: ignore[type-arg]
    """A statistics window whose figures have a seed dimension: each window closes into one statistics
    object per seed (`per_seed`); a seed whose figures hold a NaN or an infinity is listed in
    `diverged` rather than stopping the others."""

    def __init__(self, stats_class: type[Any], seeds: int, interval: int = 1) -> None:
        super().__init__(stats_class, interval)
        self.per_seed = [dataclasses.replace(self.latest) for _ in range(seeds)]
        self.diverged: dict[int, str] = {}

    def add(self, values: dict[str, torch.Tensor]) -> None:
        vector = torch.stack([values[name].detach().float() for name in stat_names(self.stats_class)])  # (F, S)
        if self._sum is None:
            self._sum = torch.zeros_like(vector)
        self._sum.add_(vector)

    def count(self, updates_done: int) -> Any:
        self._count += 1
        if updates_done % self.interval == 0 and self._sum is not None:
            columns = (self._sum / self._count).t().tolist()
            first = updates_done - self._count + 1
            self._sum.zero_()
            self._count = 0
            names = stat_names(self.stats_class)
            for seed, numbers in enumerate(columns):
                bad = [
                    f"{name} {value}" for name, value in zip(names, numbers, strict=True) if not math.isfinite(value)
                ]
                if bad:
                    span = f"update {updates_done}" if first == updates_done else f"updates {first}-{updates_done}"
                    self.diverged.setdefault(seed, f"training diverged: {', '.join(bad[:3])} (mean of {span})")
                self.per_seed[seed] = stats_from_numbers(self.stats_class, numbers)
            self.latest = self.per_seed[0]
            self.fresh = True
        return dataclasses.replace(self.latest)


class SeedBatch:
    """`members` (S algorithms of one class and one config, built with S seeds) trained as one update
    through `stacked`, the algorithm the trainer drives (see the module docstring)."""

    def __init__(self, members: Sequence[CountedOfflineAlgorithm], *, randomness: str = "different") -> None:
        first = members[0]
        if any(type(member) is not type(first) for member in members):
            raise ValueError("the members of a seed batch must be one algorithm")
        if any(getattr(member, "config", None) != getattr(first, "config", None) for member in members):
            raise ValueError("the members of a seed batch must share one config (only their seeds differ)")
        blocker = seed_batch_blocker(first)
        if blocker is not None:
            raise ValueError(f"seeds cannot train in one batch with {blocker}")
        self.members = list(members)
        self.randomness = randomness
        self.stacked = copy.deepcopy(first, memo={id(first._staged): None})
        """The algorithm whose every parameter holds all S seeds' rows, (S, ...), and whose optimisers
        step them; the one the trainer drives."""
        self.stacked.seed_batch = self
        self._stacked_names: list[str] = []
        self._compiled_losses: Callable[..., dict[str, Any]] | None = None
        for member in self.members:
            member.batched_in = self
        self.bind()

    @property
    def size(self) -> int:
        return len(self.members)

    # ----------------------------------------------------------------------------------------
    # the members' tensors as rows of the stacked ones
    def bind(self) -> None:
        """Stack the members' parameters, their buffers that differ and their optimisers' state into
        the stacked copy; the members' parameters and those buffers become views of their rows, the
        equal buffers one shared tensor. Called at the start, after a member loaded a checkpoint, and
        when a seed leaves."""
        stacked, members = self.stacked, self.members
        self._stacked_names = []
        with torch.no_grad():
            for name, param in stacked.named_parameters():
                rows = torch.stack([member.get_parameter(name).detach() for member in members])
                param.data = rows
                for index, member in enumerate(members):
                    member.get_parameter(name).data = rows[index]
                self._stacked_names.append(name)
            for name, _ in list(stacked.named_buffers()):
                values = [member.get_buffer(name) for member in members]
                equal = all(value.shape == values[0].shape and torch.equal(value, values[0]) for value in values)
                if equal and name not in stacked.SEED_BUFFERS:
                    shared = [values[0]] * (len(members) + 1)
                else:
                    rows = torch.stack(values)
                    shared = [rows, *rows.unbind()]
                    self._stacked_names.append(name)
                for module, tensor in zip([stacked, *members], shared, strict=True):
                    owner, leaf = _owner(module, name)
                    owner._buffers[leaf] = tensor
        self._stack_optimizer_state()
        stacked._captured = {}
        stacked._host_updates = int(stacked.num_updates)
        stacked.statistics = SeedStatistics(stacked.STATS, len(members), stacked.statistics.interval)

    def _stack_optimizer_state(self) -> None:
        for position, optimizer in enumerate(torch_optimizers(self.stacked)):
            own = [_flat_params(torch_optimizers(member)[position]) for member in self.members]
            states = [
                [torch_optimizers(m)[position].state.get(p, {}) for p in ps]
                for m, ps in zip(self.members, own, strict=True)
            ]
            optimizer.state.clear()
            for index, param in enumerate(_flat_params(optimizer)):
                rows = [seed_states[index] for seed_states in states]
                if rows[0]:
                    optimizer.state[param] = {
                        key: torch.stack([row[key] for row in rows]) if _per_seed(key, value) else value
                        for key, value in rows[0].items()
                    }

    def write_optimizer_rows(self, member: CountedOfflineAlgorithm) -> None:
        """Copy `member`'s row of the optimisers' state into its own optimisers (its `state_dict()` is
        then a single run's)."""
        index = self.members.index(member)
        for position, optimizer in enumerate(torch_optimizers(self.stacked)):
            own = torch_optimizers(member)[position]
            for own_group, group in zip(own.param_groups, optimizer.param_groups, strict=True):
                own_group.update({key: value for key, value in group.items() if key != "params"})
            own.state.clear()
            for own_param, param in zip(_flat_params(own), _flat_params(optimizer), strict=True):
                state = optimizer.state.get(param)
                if state:
                    own.state[own_param] = {
                        key: value[index].clone() if _per_seed(key, value) else _copy(value)
                        for key, value in state.items()
                    }

    def remove(self, member: CountedOfflineAlgorithm) -> None:
        """Take `member` (a diverged seed) out of the batch; the others train on, stacked afresh."""
        for each in self.members:
            self.write_optimizer_rows(each)
        self.members.remove(member)
        member.batched_in = None
        with torch.no_grad():  # its own tensors again, no longer rows of the batch's
            for param in member.parameters():
                param.data = param.data.clone()
        if self.members:
            self.bind()

    # ----------------------------------------------------------------------------------------
    # one update
    def sampled_step(self, draw: Callable[[int], Any], batch_size: int, key: Hashable, *, eager: bool = False) -> Any:
        """One batched update on S batches of `batch_size` (`draw(S·batch_size)`, cut into S), eager or
        replayed as one graph; each member's statistics window gets its seed's figures. Returns the
        first seed's statistics for the trainer."""
        seeds, stacked = self.size, self.stacked

        def step() -> dict[str, torch.Tensor]:
            rows = draw(seeds * batch_size)  # S batches: consecutive runs of batch_size rows
            return self.gradient_step(tree_map(lambda column: _per_seed_rows(column, seeds), rows))

        options = tuple(stacked.loss_options().values())
        stats = stacked.run_step(step, (key, seeds, batch_size, *options), eager=eager)
        window = stacked.statistics
        if window.fresh:  # a window closed: each seed's trainer logs its own (the stacked copy's stays fresh)
            for member, own in zip(self.members, window.per_seed, strict=True):
                member._host_updates = stacked._host_updates
                member.statistics.latest, member.statistics.fresh = own, True
        return stats

    def losses(self, method: str, batches: Any, options: dict[str, Any]) -> dict[str, Any]:
        """`method` (a stage's losses) for every seed at once: the losses and figures, each (S,)."""
        template = self.members[0]
        tensors = {name: _tensor(self.stacked, name) for name in self._stacked_names}

        def one_seed(own: dict[str, torch.Tensor], batch: Any) -> dict[str, Any]:
            with swapped_tensors(template, own):
                result = getattr(template, method)(batch, **options)
            return {"parts": result.parts, "figures": result.figures}

        batch_dims = tree_map(lambda column: None if column is None else 0, batches)
        return torch.func.vmap(one_seed, in_dims=(0, batch_dims), randomness=self.randomness)(tensors, batches)

    def gradient_step(self, batches: Any) -> dict[str, torch.Tensor]:
        """One batched update on `batches` (each column (S, B, ...)): per stage, every seed's losses,
        one backward pass over their sum, the stacked copy's optimiser steps; then the count. Returns
        the figures, each (S,)."""
        stacked = self.stacked
        options = stacked.loss_options()
        figures: dict[str, torch.Tensor] = {}
        losses = self.losses
        if stacked._compiled is not None:  # the stacked copy is about to be captured, compiled: so are the losses
            if self._compiled_losses is None:
                self._compiled_losses = torch.compile(self.losses, dynamic=False)
            losses = self._compiled_losses
        for losses_method, apply_method in stacked.STAGES:
            result = losses(losses_method, batches, options)
            figures.update(result["figures"])
            if not result["parts"]:
                continue
            for optim in stacked.stepped_optimizers():
                optim.zero_grad(set_to_none=True)
            sum(part.sum() for part in result["parts"].values()).backward()  # type: ignore[union-attr]
            getattr(stacked, apply_method)()
        stacked.count_update()
        return figures


def _owner(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The submodule holding the parameter or buffer `name` (dotted), and its name there."""
    path, _, leaf = name.rpartition(".")
    return module.get_submodule(path), leaf


def _tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    owner, leaf = _owner(module, name)
    return owner._parameters[leaf] if leaf in owner._parameters else owner._buffers[leaf]


def _per_seed_rows(column: torch.Tensor | None, seeds: int) -> torch.Tensor | None:
    return None if column is None else column.view(seeds, -1, *column.shape[1:])


def _flat_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [param for group in optimizer.param_groups for param in group["params"]]


def _per_seed(key: str, value: Any) -> bool:
    """Whether an optimiser state entry has a row per seed (Adam's moments do; its step count, the same
    for every seed, does not)."""
    return key != "step" and isinstance(value, torch.Tensor)


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value
