"""TorchRL's `TD3BCLoss` and `IQLLoss`, set up as its offline reference implementations set them up
(`sota-implementations/td3_bc/` and `sota-implementations/iql/iql_offline.py` in TorchRL 0.14), as columns
of `offline_algorithms_throughput.py`.

TorchRL is not a dependency of offline_rl: this module imports it only when a TorchRL column is asked for.
What follows the references: TD3+BC's actor, an MLP → tanh on the action box, and its critic, an MLP on
the observation beside the action (two copies inside the loss), `loss_function` l2, the critics stepped
every update and the actor with the targets every second one (`policy_update_delay` 2), Adam at 3e-4;
IQL's actor, an MLP → `NormalParamExtractor` → `TanhNormal`, its critics and value network (MLPs), l2,
expectile 0.7, temperature 3, one closure summing the three losses and stepping the grouped optimisers
and the soft target update. 2×256 networks, γ 0.99, τ 0.005, and the reference's modes: eager,
`torch.compile` (`reduce-overhead`), and compiled plus tensordict's `CudaGraphModule` (CUDA only).

Where it departs from the references, in TorchRL's favour or to match the other columns: the dataset sits
on the benchmark's device (`LazyTensorStorage`, uniform sampling), and statistics are not read back per
update.
"""

from __future__ import annotations

from typing import Any

import torch
from torchrl_baseline import TorchRLColumn

HIDDEN = [256, 256]


def _critic(in_keys: list[str], out_key: str) -> Any:
    from torchrl.modules import MLP, ValueOperator

    return ValueOperator(
        module=MLP(num_cells=HIDDEN, out_features=1, activation_class=torch.nn.ReLU),
        in_keys=in_keys,
        out_keys=[out_key],
    )


def _action_spec(act_dim: int, device: torch.device) -> Any:
    from torchrl.data import Bounded

    return Bounded(-torch.ones(act_dim), torch.ones(act_dim), (act_dim,), device=device)


class TorchRLTD3BC(TorchRLColumn):
    """TorchRL's `TD3BCLoss` and the reference's update closure, in one of the modes."""

    def __init__(self, obs_dim: int, act_dim: int, *, device: str, mode: str = "eager", batch_size: int = 256) -> None:
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torchrl.modules import MLP, TanhModule
        from torchrl.objectives import SoftUpdate, TD3BCLoss

        super().__init__(device=device, mode=mode, batch_size=batch_size)
        spec = _action_spec(act_dim, self.device)
        actor = TensorDictSequential(
            TensorDictModule(
                MLP(num_cells=HIDDEN, out_features=act_dim, activation_class=torch.nn.ReLU),
                in_keys=["observation"],
                out_keys=["param"],
            ),
            TanhModule(in_keys=["param"], out_keys=["action"], spec=spec),
        )
        critic = _critic(["observation", "action"], "state_action_value")
        model = torch.nn.ModuleList([actor, critic]).to(self.device)
        with torch.no_grad():  # lazy modules take their shapes from a first call
            probe = self.empty_batch(obs_dim, act_dim, 2)
            for net in model:
                net(probe)
        self.loss_module = TD3BCLoss(
            actor_network=model[0], qvalue_network=model[1], action_spec=spec, num_qvalue_nets=2,
            loss_function="l2", policy_noise=0.2, noise_clip=0.5, alpha=2.5,
        )  # fmt: skip
        self.loss_module.make_value_estimator(gamma=0.99)
        target_updater = SoftUpdate(self.loss_module, tau=0.005)
        actor_optim = torch.optim.Adam(list(self.loss_module.actor_network_params.flatten_keys().values()), lr=3e-4)
        critic_optim = torch.optim.Adam(list(self.loss_module.qvalue_network_params.flatten_keys().values()), lr=3e-4)
        loss_module = self.loss_module

        def critic_update(data: Any) -> torch.Tensor:
            q_loss, _ = loss_module.qvalue_loss(data.copy())
            q_loss.backward()
            critic_optim.step()
            critic_optim.zero_grad(set_to_none=True)
            return q_loss.detach()

        def actor_update(data: Any) -> torch.Tensor:
            actor_loss, _ = loss_module.actor_loss(data.copy())
            actor_loss.backward()
            actor_optim.step()
            actor_optim.zero_grad(set_to_none=True)
            target_updater.step()
            return actor_loss.detach()

        self._critic_step, self._actor_step = self.wrapped(critic_update), self.wrapped(actor_update)
        self._updates = 0

    def update(self, buffer: Any = None, sample_size: int | None = None) -> Any:
        data = self.next_batch()
        out = self._critic_step(data)
        self._updates += 1
        if self._updates % 2 == 0:  # the reference's policy_update_delay
            out = self._actor_step(data)
        return out


class TorchRLIQL(TorchRLColumn):
    """TorchRL's `IQLLoss` and the reference's update closure, in one of the modes."""

    def __init__(self, obs_dim: int, act_dim: int, *, device: str, mode: str = "eager", batch_size: int = 256) -> None:
        from tensordict.nn import NormalParamExtractor, TensorDictModule
        from torchrl.modules import MLP, ProbabilisticActor, TanhNormal
        from torchrl.objectives import IQLLoss, SoftUpdate, group_optimizers

        super().__init__(device=device, mode=mode, batch_size=batch_size)
        spec = _action_spec(act_dim, self.device)
        actor_net = torch.nn.Sequential(
            MLP(num_cells=HIDDEN, out_features=2 * act_dim, activation_class=torch.nn.ReLU),
            NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=0.1),
        )
        actor = ProbabilisticActor(
            module=TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"],
            spec=spec,
            distribution_class=TanhNormal,
            distribution_kwargs={"low": spec.space.low, "high": spec.space.high, "tanh_loc": False},
        )
        model = torch.nn.ModuleList(
            [actor, _critic(["observation", "action"], "state_action_value"), _critic(["observation"], "state_value")]
        ).to(self.device)
        with torch.no_grad():
            probe = self.empty_batch(obs_dim, act_dim, 2)
            for net in model:
                net(probe)
        self.loss_module = IQLLoss(
            model[0], model[1], value_network=model[2], loss_function="l2", temperature=3.0, expectile=0.7
        )
        self.loss_module.make_value_estimator(gamma=0.99)
        target_updater = SoftUpdate(self.loss_module, tau=0.005)
        optimizer = group_optimizers(
            torch.optim.Adam(list(self.loss_module.actor_network_params.flatten_keys().values()), lr=3e-4),
            torch.optim.Adam(list(self.loss_module.qvalue_network_params.flatten_keys().values()), lr=3e-4),
            torch.optim.Adam(list(self.loss_module.value_network_params.flatten_keys().values()), lr=3e-4),
        )
        loss_module = self.loss_module

        def update(data: Any) -> torch.Tensor:
            loss_vals = loss_module(data.copy())
            loss = loss_vals["loss_actor"] + loss_vals["loss_qvalue"] + loss_vals["loss_value"]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            target_updater.step()
            return loss.detach()

        self._step = self.wrapped(update)

    def update(self, buffer: Any = None, sample_size: int | None = None) -> Any:
        return self._step(self.next_batch())
