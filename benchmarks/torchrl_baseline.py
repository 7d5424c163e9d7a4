"""TorchRL's `CQLLoss`, set up as its offline CQL reference implementation sets it up
(`sota-implementations/cql/cql_offline.py` and `utils.py` in TorchRL 0.14), as a third column of
`cql_sac_throughput.py`.

TorchRL is not a dependency of offline_rl: this module imports it only when a TorchRL column is
asked for. What follows the reference: the actor (an MLP, 2×256 as there, or ours' 3×256 when the
benchmark asks, → `NormalParamExtractor` with `biased_softplus_1.0`, scale ≥ 0.1 → `TanhNormal`
on the action bounds), the critic (an MLP on the concatenated observation and action, two copies
run by `vmap` inside `CQLLoss`), `loss_function` l2, temperature 1, `num_random` N, stochastic
backup, one `update` closure that adds the four losses, calls one backward, steps the grouped Adam
optimisers and the soft target update, and the three ways the reference runs that closure: eager,
`torch.compile` (`reduce-overhead`), and `torch.compile` plus tensordict's `CudaGraphModule`
(CUDA only).

Where it departs from the reference, always in TorchRL's favour or to match the other columns:
α fixed at 0.2 and the Lagrange multiplier off (the benchmark's shared configuration, so every
column does the same arithmetic); the dataset held on the benchmark's device in a
`LazyTensorStorage` with uniform sampling (the reference samples on the host and copies each batch
over); statistics are not read back every update (the reference calls `.cpu()` on them per update,
a device synchronisation); the `update` closure returns them, so nothing it computes is dead code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from peer_column import CQLSetup, PeerColumn

MODES = ("eager", "compiled", "cudagraph")


class TorchRLColumn(PeerColumn):
    """A TorchRL loss module's update closure in one of `MODES`, fed from TorchRL's replay buffer on the
    benchmark's device: what every TorchRL column shares."""

    def __init__(self, *, device: str, mode: str, batch_size: int) -> None:
        if mode not in MODES:
            raise ValueError(f"TorchRL mode {mode!r}: expected one of {', '.join(MODES)}")
        super().__init__()
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.mode = mode
        # CudaGraphModule runs its first 50 calls uncaptured; the timer's warm-up must cover them
        self.warmup_updates = 55 if mode == "cudagraph" else 5
        self._replay: Any = None

    def wrapped(self, update: Any) -> Any:
        """The closure as the mode runs it: as is, `torch.compile`d, or compiled and captured."""
        if self.mode == "eager":
            return update
        if self.mode == "compiled":
            return torch.compile(update, mode="reduce-overhead")
        if self.device.type != "cuda":
            raise ValueError("TorchRL mode 'cudagraph' needs a CUDA device")
        from tensordict.nn import CudaGraphModule

        return CudaGraphModule(torch.compile(update, mode="default"), warmup=50)

    def process_buffer(self, buffer: Any) -> None:
        """Copy a Tianshou buffer's transitions into TorchRL's replay buffer on the device."""
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.data.replay_buffers import RandomSampler

        size = len(buffer)
        batch = buffer[np.arange(size)]

        def column(values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.asarray(values)).to(dtype)

        data = TensorDict(
            {
                "observation": column(batch.obs),
                "action": column(batch.act),
                ("next", "observation"): column(batch.obs_next),
                ("next", "reward"): column(batch.rew).unsqueeze(-1),
                ("next", "done"): column(batch.done, torch.bool).unsqueeze(-1),
                ("next", "terminated"): column(batch.terminated, torch.bool).unsqueeze(-1),
            },
            batch_size=[size],
        )
        self._replay = TensorDictReplayBuffer(
            storage=LazyTensorStorage(size, device=self.device),
            sampler=RandomSampler(),
            batch_size=self.batch_size,
        )
        self._replay.extend(data)

    def empty_batch(self, obs_dim: int, act_dim: int, size: int) -> Any:
        from tensordict import TensorDict

        return TensorDict(
            {
                "observation": torch.zeros(size, obs_dim),
                "action": torch.zeros(size, act_dim),
                ("next", "observation"): torch.zeros(size, obs_dim),
                ("next", "reward"): torch.zeros(size, 1),
                ("next", "done"): torch.zeros(size, 1, dtype=torch.bool),
                ("next", "terminated"): torch.zeros(size, 1, dtype=torch.bool),
            },
            batch_size=[size],
            device=self.device,
        )

    def next_batch(self) -> Any:
        data = self._replay.sample()
        if self.mode != "eager":
            torch.compiler.cudagraph_mark_step_begin()
        return data


class TorchRLCQL(TorchRLColumn):
    """TorchRL's `CQLLoss` and its update closure, in one of `MODES`."""

    def __init__(self, setup: CQLSetup, *, device: str, mode: str = "eager") -> None:
        from tensordict.nn import NormalParamExtractor, TensorDictModule
        from torchrl.data import Bounded
        from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
        from torchrl.objectives import CQLLoss, SoftUpdate, group_optimizers

        super().__init__(device=device, mode=mode, batch_size=setup.batch_size)
        act_dim, hidden_sizes = setup.act_dim, setup.hidden_sizes
        action_spec = Bounded(-torch.ones(act_dim), torch.ones(act_dim), (act_dim,), device=self.device)
        actor_net = torch.nn.Sequential(
            MLP(num_cells=list(hidden_sizes), out_features=2 * act_dim, activation_class=torch.nn.ReLU),
            NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=0.1),
        )
        actor = ProbabilisticActor(
            module=TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"],
            spec=action_spec,
            distribution_class=TanhNormal,
            distribution_kwargs={
                "low": action_spec.space.low,
                "high": action_spec.space.high,
                "tanh_loc": False,
            },
        )
        critic = ValueOperator(
            module=MLP(num_cells=list(hidden_sizes), out_features=1, activation_class=torch.nn.ReLU),
            in_keys=["observation", "action"],
            out_keys=["state_action_value"],
        )
        model = torch.nn.ModuleList([actor, critic]).to(self.device)
        with torch.no_grad():  # TorchRL's lazy modules take their shapes from a first call
            probe = self.empty_batch(setup.obs_dim, act_dim, 2)
            for net in model:
                net(probe)
        self.loss_module = CQLLoss(
            model[0],
            model[1],
            loss_function="l2",
            alpha_init=setup.alpha,
            fixed_alpha=True,
            temperature=1.0,
            min_q_weight=setup.cql_weight,
            max_q_backup=False,
            deterministic_backup=False,
            num_random=setup.n_actions,
            with_lagrange=False,
        )
        self.loss_module.make_value_estimator(gamma=0.99, device=self.device)
        self.target_updater = SoftUpdate(self.loss_module, tau=0.005)
        critic_params = list(self.loss_module.qvalue_network_params.flatten_keys().values())
        actor_params = list(self.loss_module.actor_network_params.flatten_keys().values())
        self.optimizer = group_optimizers(
            torch.optim.Adam(actor_params, lr=3e-4),
            torch.optim.Adam(critic_params, lr=3e-4),
            torch.optim.Adam([self.loss_module.log_alpha], lr=3e-4),
        )
        self.policy_eval_start = torch.tensor(0, device=self.device)  # past the behaviour-cloning start
        self.iteration = torch.tensor(1, device=self.device)
        self._step = self._build_step()

    def _build_step(self) -> Any:
        loss_module, optimizer, target_updater = self.loss_module, self.optimizer, self.target_updater

        def update(data: Any, policy_eval_start: torch.Tensor, iteration: torch.Tensor) -> tuple[Any, Any]:
            # TorchRL's losses write their intermediates (loc, scale, td_error...) into the batch they are
            # given. On a shallow copy the batch keeps its keys, so the graph CudaGraphModule captures
            # sees the input it was compiled for instead of recompiling inside the capture and failing.
            loss_vals = loss_module(data.copy())
            actor_loss = torch.where(
                iteration >= policy_eval_start, loss_vals["loss_actor"], loss_vals["loss_actor_bc"]
            )
            q_loss = loss_vals["loss_qvalue"] + loss_vals["loss_cql"]
            loss = actor_loss + q_loss + loss_vals["loss_alpha"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            target_updater.step()
            return loss.detach(), loss_vals.detach()

        return self.wrapped(update)

    def update(self, buffer: Any = None, sample_size: int | None = None) -> tuple[Any, Any]:
        return self._step(self.next_batch(), policy_eval_start=self.policy_eval_start, iteration=self.iteration)


def torchrl_version() -> str:
    import tensordict
    import torchrl

    return f"torchrl {torchrl.__version__}, tensordict {tensordict.__version__}"
