"""Our CQL-SAC and discrete CQL losses and gradients beside d3rlpy's, on the same weights and batch.

d3rlpy is an independent implementation of CQL (Kumar et al. 2020) that researchers already trust.
Where the two agree, a convention of ours (the 3N actions of each state, their log-densities, which
critics the sums run over, mean or half-mean squares, the target's entropy, the max backup's order,
the dual step of α′, Cal-QL's floor) is one that a second, separately written implementation shares.
Where they differ, the difference is d3rlpy's choice or ours, and this script shows which term it is in.

Each case copies our freshly built actor and critics into d3rlpy's networks: the same layers (ReLU
MLPs, the critics over the state beside the action, the actor's last layer split into d3rlpy's mean
and log-std heads, log-std clamped to [-20, 2] by both; one case builds ours as a Tianshou script
does, `offline_rl.CQL` over Tianshou's `ContinuousActorProbabilistic` and `ContinuousCritic`s). It
checks that both give the same Q-values, Gaussian parameters and log-densities to float precision,
then draws TRIALS independent updates' worth of samples on each side from the same batch (no
optimiser steps) and compares:

- the TD loss, the conservative loss (w · gap, summed over critics) and the actor loss;
- the critics' and the actor's gradients, coordinate by coordinate;
- with the Lagrange variant, the gradient of the dual loss with respect to log α′.

Discrete CQL draws nothing, so there both must match to float rounding (`d3rlpy_discrete_agreement.py`).
CQL-SAC's sampled terms are equal only in expectation, and the two libraries draw their noise
differently, so each comparison is a z-score of the difference of the two sides' means
(`expectation_agreement.py`): a convention that differs (a factor ½, a term left out, another axis)
gives z in the tens or hundreds, where agreement keeps it below 4. `--plant` puts such a mistake into
ours (among them Tianshou 2.0.1's all +1 "random" actions) to show that every case then differs.

d3rlpy is not a dependency (it pins gymnasium 1.0.0): install it beside the project without its
dependencies:

    pip install --no-deps d3rlpy==2.8.1 structlog dataclasses-json "marshmallow<4" typing-inspect \\
        mypy_extensions colorama scikit-learn joblib threadpoolctl scipy gym==0.26.2 cloudpickle
    python benchmarks/d3rlpy_agreement.py
"""

from __future__ import annotations

import offline_rl  # first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from d3rlpy_baseline import quiet_d3rlpy
from d3rlpy_discrete_agreement import DISCRETE_CASES, NUM_ACTIONS, NUM_QUANTILES, run_discrete_case
from expectation_agreement import Agreement, agreement
from torch import nn

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.cql_sac.networks import TanhGaussianActor, gaussian_params, tanh_gaussian_log_prob
from offline_rl.algorithms.networks import EnsembleCritic
from offline_rl.algorithms.staging import Transitions

OBS_DIM, ACT_DIM, HIDDEN, BATCH = 6, 3, (64, 64), 128
ALPHA, CQL_WEIGHT, GAMMA = 0.2, 5.0, 0.99
MIN_TRIALS = 200


@dataclass(frozen=True)
class Case:
    """One configuration of both libraries that should compute the same expected update."""

    name: str
    ours: dict[str, Any]
    d3rlpy: dict[str, Any]
    d3rlpy_algorithm: str = "CQLConfig"
    tianshou: bool = False
    """ours built as a Tianshou script builds it: `offline_rl.CQL` over Tianshou's networks"""


CASES = (
    Case(
        "SAC target with entropy (ours --backup-entropy; d3rlpy soft_q_backup=True)",
        {"backup_entropy": True},
        {"soft_q_backup": True},
    ),
    Case(
        "max target backup (ours --max-target-backup; d3rlpy max_q_backup=True)",
        {"max_target_backup": True},
        {"max_q_backup": True},
    ),
    Case(
        "Lagrange α′ (ours --with-lagrange --target-action-gap 1; d3rlpy alpha_threshold=1)",
        {"backup_entropy": True, "with_lagrange": True, "target_action_gap": 1.0, "lagrange_multiplier_init": 2.0},
        {"soft_q_backup": True, "alpha_threshold": 1.0, "initial_alpha": 2.0, "alpha_learning_rate": 1e-30},
    ),
    Case(
        "Cal-QL (ours --calibrated; d3rlpy CalQL): π's values floored at the Monte-Carlo return from s",
        {"backup_entropy": True, "calibrated": True},
        {"soft_q_backup": True},
        "CalQLConfig",
    ),
    Case(
        "the Tianshou drop-in at Tianshou's defaults (offline_rl.CQL over Tianshou's networks: Lagrange, Cal-QL, "
        "entropy in the target, threshold 10 on w·gap; d3rlpy CalQL, alpha_threshold 10/w)",
        {},
        {"soft_q_backup": True, "alpha_threshold": 10.0 / CQL_WEIGHT, "alpha_learning_rate": 1e-30},
        "CalQLConfig",
        tianshou=True,
    ),
    Case(
        "CORL's and our default target (a′ ~ π) against d3rlpy's default (a′ = tanh(mean)): expected to differ",
        {},
        {},
    ),
)


# --------------------------------------------------------------------------------------------
# the two implementations, with the same weights
def build_ours(options: dict[str, Any]) -> CQLSAC:
    box = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    observations = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    config = CQLSACConfig(
        actor_hidden_sizes=list(HIDDEN),
        critic_layers=len(HIDDEN),
        critic_width=HIDDEN[0],
        alpha=ALPHA,
        auto_alpha=False,
        cql_weight=CQL_WEIGHT,
        gamma=GAMMA,
        normalize_obs=False,
        orthogonal_init=False,  # torch's default: Q-values that vary with the action from the start
        **options,
    )
    return CQLSAC.build(observations, box, config, device="cpu")


PLANTS = {
    "constant-random-actions": "the uniform actions all +1, as Tianshou 2.0.1's CQL draws them",
    "terminals-bootstrap": "the TD target bootstraps through terminal transitions",
    "no-density-correction": "the π(·|s) and π(·|s′) values enter the logsumexp without their log-densities",
}


def plant(algorithm: CQLSAC, bug: str) -> None:
    """Put a known mistake into our update, to see the comparison catch it (`--plant`)."""
    if bug == "constant-random-actions":
        draw = algorithm.sample_actions
        algorithm.sample_actions = lambda obs, obs_next: (samples := draw(obs, obs_next))._replace(
            random_actions=torch.ones_like(samples.random_actions)
        )
    elif bug == "terminals-bootstrap":
        target = algorithm.td_target
        algorithm.td_target = lambda rew, not_terminated, *rest, **options: target(
            rew, torch.ones_like(not_terminated), *rest, **options
        )
    elif bug == "no-density-correction":
        gap = algorithm.conservative_gap
        algorithm.conservative_gap = lambda q_data, q_random, q_now, q_next, log_prob, next_log_prob: gap(
            q_data, q_random, q_now, q_next, torch.zeros_like(log_prob), torch.zeros_like(next_log_prob)
        )
    else:
        raise ValueError(f"no planted bug {bug!r}: one of {', '.join(PLANTS)}")


def build_d3rlpy(options: dict[str, Any], n_actions: int, algorithm: str = "CQLConfig") -> Any:
    import d3rlpy

    encoder = d3rlpy.models.VectorEncoderFactory(hidden_units=list(HIDDEN))
    settings: dict[str, Any] = dict(
        batch_size=BATCH,
        gamma=GAMMA,
        actor_encoder_factory=encoder,
        critic_encoder_factory=encoder,
        n_critics=2,
        initial_temperature=ALPHA,
        temp_learning_rate=0.0,
        initial_alpha=1.0,
        alpha_learning_rate=0.0,
        alpha_threshold=0.0,
        conservative_weight=CQL_WEIGHT,
        n_action_samples=n_actions,
    )
    settings.update(options)
    algo = getattr(d3rlpy.algos, algorithm)(**settings).create(device="cpu:0")
    algo.create_impl((OBS_DIM,), ACT_DIM)
    return algo.impl


def build_tianshou_dropin(options: dict[str, Any]) -> CQLSAC:
    """`offline_rl.CQL` as a Tianshou 2 script builds it (its `test/offline/test_cql.py`'s constructors),
    at Tianshou's defaults but for α, w and N, which all cases share."""
    from tianshou.algorithm.modelfree.sac import SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    def critic() -> ContinuousCritic:
        net = Net(state_shape=(OBS_DIM,), action_shape=(ACT_DIM,), hidden_sizes=list(HIDDEN), concat=True)
        return ContinuousCritic(preprocess_net=net)

    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=(OBS_DIM,), hidden_sizes=list(HIDDEN)),
        action_shape=(ACT_DIM,),
        unbounded=True,
        conditioned_sigma=True,
    )
    box = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    return offline_rl.CQL(
        policy=SACPolicy(actor=actor, action_space=box),
        policy_optim=AdamOptimizerFactory(),
        critic=critic(),
        critic_optim=AdamOptimizerFactory(),
        critic2=critic(),
        alpha=ALPHA,
        cql_weight=CQL_WEIGHT,
        **options,
    )


Layers = list[tuple[torch.Tensor, torch.Tensor]]


def actor_layers(actor: nn.Module, get: Callable[[torch.Tensor], torch.Tensor] = lambda p: p) -> Layers:
    """(weight, bias) of each of our actor's layers as d3rlpy's policy has them: the hidden layers, the
    mean head, the log-std head; `get` picks the parameter itself or its gradient. Our own actor's last
    layer gives mean and log-std together; Tianshou's actor has the two heads, as d3rlpy's."""
    linears = [module for module in actor.modules() if isinstance(module, nn.Linear)]
    if not isinstance(actor, TanhGaussianActor):
        return [(get(linear.weight), get(linear.bias)) for linear in linears]
    *hidden, head = linears
    weight, bias = get(head.weight), get(head.bias)
    heads = [(weight[:ACT_DIM], bias[:ACT_DIM]), (weight[ACT_DIM:], bias[ACT_DIM:])]
    return [(get(linear.weight), get(linear.bias)) for linear in hidden] + heads


def critic_layers(critic: nn.Module, member: int, get: Callable[[torch.Tensor], torch.Tensor] = lambda p: p) -> Layers:
    """(weight, bias) of each layer of one critic, in d3rlpy's (out, in) layout: our stacked critics keep
    (E, in, out) weights; Tianshou's critics are `nn.Linear`s already."""
    if isinstance(critic, EnsembleCritic):
        return [(get(w)[member].T, get(b)[member, 0]) for w, b in zip(critic.weights, critic.biases, strict=True)]
    members = critic.members[member].modules()
    return [(get(linear.weight), get(linear.bias)) for linear in members if isinstance(linear, nn.Linear)]


def linears(module: nn.Module) -> list[nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, nn.Linear)]


def copy_weights(ours: CQLSAC, impl: Any) -> None:
    """Our actor and critics into d3rlpy's modules (its critic targets too), layer by layer."""
    modules = impl._modules
    with torch.no_grad():
        for (weight, bias), theirs in zip(actor_layers(ours.actor), linears(modules.policy), strict=True):
            theirs.weight.copy_(weight)
            theirs.bias.copy_(bias)
        if isinstance(ours.actor, TanhGaussianActor):
            modules.policy._logstd.bias.add_(ours.actor.log_std_offset)  # CORL's offset, ours too
        for functions in (modules.q_funcs, modules.targ_q_funcs):
            for member, q_function in enumerate(functions):
                for (weight, bias), theirs in zip(critic_layers(ours.critic, member), linears(q_function), strict=True):
                    theirs.weight.copy_(weight)
                    theirs.bias.copy_(bias)
        ours.critic_target.load_state_dict(ours.critic.state_dict())
        if hasattr(ours, "log_lagrange_multiplier") and modules.log_alpha is not None:
            log_alpha = modules.log_alpha._parameter
            log_alpha.copy_(ours.log_lagrange_multiplier.detach().reshape(log_alpha.shape))


@dataclass(frozen=True)
class Batch:
    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    terminated: torch.Tensor
    obs_next: torch.Tensor
    mc_return: torch.Tensor
    """the discounted return of each state's episode from it on, which Cal-QL floors values at"""


def make_batch(seed: int) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(BATCH, OBS_DIM, generator=generator),
        act=torch.rand(BATCH, ACT_DIM, generator=generator).mul(1.8).sub(0.9),
        rew=torch.randn(BATCH, generator=generator),
        terminated=(torch.rand(BATCH, generator=generator) < 0.2).float(),
        obs_next=torch.randn(BATCH, OBS_DIM, generator=generator),
        mc_return=torch.randn(BATCH, generator=generator).mul(0.5),  # around the critics' values: some floors bite
    )


def d3rlpy_batch(batch: Batch) -> Any:
    from d3rlpy.torch_utility import TorchMiniBatch

    column = lambda values: values.unsqueeze(1)  # noqa: E731  (d3rlpy keeps (B, 1) columns)
    return TorchMiniBatch(
        observations=batch.obs,
        actions=batch.act,
        rewards=column(batch.rew),
        next_observations=batch.obs_next,
        next_actions=torch.zeros_like(batch.act),
        returns_to_go=column(batch.mc_return),
        terminals=column(batch.terminated),
        intervals=torch.ones(BATCH, 1),
        device="cpu:0",
    )


def deterministic_differences(ours: CQLSAC, impl: Any, batch: Batch) -> dict[str, float]:
    """What both compute without drawing: Q-values at the data's actions, the actor's Gaussian, and the
    log-density of the data's actions. Largest absolute differences."""
    from d3rlpy.models.torch import build_squashed_gaussian_distribution

    with torch.no_grad():
        q_ours = ours.critic(batch.obs, batch.act.unsqueeze(1))[..., 0]  # (E, B)
        q_theirs = impl._q_func_forwarder.compute_expected_q(batch.obs, batch.act, "none")[..., 0]
        mean, log_std = gaussian_params(ours.actor)(batch.obs)
        output = impl._modules.policy(batch.obs)
        log_prob_ours = tanh_gaussian_log_prob(mean, log_std, batch.act)
        log_prob_theirs = build_squashed_gaussian_distribution(output).log_prob(batch.act)[:, 0]
    return {
        "Q(s, a_data)": float((q_ours - q_theirs).abs().max()),
        "actor mean": float((mean - output.mu).abs().max()),
        "actor log-std": float((log_std - output.logstd).abs().max()),
        "log π(a_data|s)": float((log_prob_ours - log_prob_theirs).abs().max()),
    }


def flat_gradient(parameters: Sequence[torch.Tensor]) -> np.ndarray:
    return torch.cat([p.grad.reshape(-1) for p in parameters]).numpy().copy()


def our_draw(ours: CQLSAC, batch: Batch) -> dict[str, np.ndarray]:
    """One update's losses and gradients (no optimiser step). Our critics' weights are (E, in, out);
    transposed to d3rlpy's per-critic (out, in) order so the coordinates line up."""
    ours.zero_grad(set_to_none=True)
    not_terminated = 1.0 - batch.terminated
    out = ours.compute_losses(
        Transitions(batch.obs, batch.act, batch.rew, not_terminated, batch.obs_next, batch.mc_return)
    )
    losses, stats = out.parts, out.figures
    sum(losses.values()).backward()
    gradient = lambda parameter: parameter.grad  # noqa: E731
    members = range(ours.critic.num_critics)
    critic_grad = [t.reshape(-1) for m in members for pair in critic_layers(ours.critic, m, gradient) for t in pair]
    actor_grad = [t.reshape(-1) for pair in actor_layers(ours.actor, gradient) for t in pair]
    conservative = stats["critic_loss"] - stats["td_loss"]
    with torch.no_grad():  # the per-state target, from an update's draws of its own
        samples = ours.sample_actions(batch.obs, batch.obs_next)
        target = ours.td_target(
            batch.rew, not_terminated, batch.obs_next, samples.next_actions, samples.next_log_prob, ours.alpha
        )
    draw = {
        "TD target": target.numpy().copy(),
        "TD loss": stats["td_loss"].numpy().copy(),
        "conservative loss": conservative.numpy().copy(),
        "actor loss": stats["actor_loss"].numpy().copy(),
        "critics' gradient": torch.cat(critic_grad).numpy().copy(),
        "actor's gradient": torch.cat(actor_grad).numpy().copy(),
    }
    if ours.config.with_lagrange:
        draw["dual gradient (log α′)"] = ours.log_lagrange_multiplier.grad.reshape(-1).numpy().copy()
    return draw


def d3rlpy_draw(impl: Any, batch: Any, lagrange: bool) -> dict[str, np.ndarray]:
    """The same from d3rlpy's own loss methods, as its `update` calls them (no optimiser step: α′'s
    own step inside `compute_critic_loss` has a learning rate of 1e-30, and its gradient is kept)."""
    modules = impl._modules
    critic_parameters = [p for q in modules.q_funcs for p in q.parameters()]
    for parameter in [*critic_parameters, *modules.policy.parameters()]:
        parameter.grad = None
    q_tpn = impl.compute_target(batch)
    critic = impl.compute_critic_loss(batch, q_tpn)
    # α′'s own backward pass ran inside; the critic loss below would add its gradient to log α′ too
    dual_gradient = modules.log_alpha._parameter.grad.clone() if lagrange else None
    critic.critic_loss.backward()
    critic_grad = flat_gradient(critic_parameters)
    for parameter in critic_parameters:
        parameter.grad = None
    actor = impl.compute_actor_loss(batch, modules.policy(batch.observations))
    actor.actor_loss.backward()
    actor_grad = flat_gradient(list(modules.policy.parameters()))  # its layers, then the mean and log-std heads
    with torch.no_grad():
        target = batch.rewards + impl._gamma * (1.0 - batch.terminals) * impl.compute_target(batch)
    draw = {
        "TD target": target[:, 0].numpy().copy(),
        "TD loss": (critic.critic_loss - critic.conservative_loss).detach().numpy().copy(),
        "conservative loss": critic.conservative_loss.detach().numpy().copy(),
        "actor loss": actor.actor_loss.detach().numpy().copy(),
        "critics' gradient": critic_grad,
        "actor's gradient": actor_grad,
    }
    if lagrange:
        draw["dual gradient (log α′)"] = dual_gradient.reshape(-1).numpy().copy()
    return draw


def draws(sample: Callable[[], dict[str, np.ndarray]], trials: int, seed: int) -> dict[str, np.ndarray]:
    results: dict[str, list[np.ndarray]] = {}
    for trial in range(trials):
        torch.manual_seed(seed + trial)
        for name, value in sample().items():
            results.setdefault(name, []).append(value)
    return {name: np.stack(values) for name, values in results.items()}


def run_case(
    case: Case, *, trials: int, n_actions: int, seed: int, bug: str | None = None
) -> tuple[dict[str, float], dict[str, Agreement]]:
    torch.manual_seed(seed)
    if case.tianshou:
        ours = build_tianshou_dropin({**case.ours, "num_repeat_actions": n_actions})
    else:
        ours = build_ours({**case.ours, "cql_n_actions": n_actions})
    impl = build_d3rlpy(case.d3rlpy, n_actions, case.d3rlpy_algorithm)
    copy_weights(ours, impl)
    if bug:
        plant(ours, bug)
    batch = make_batch(seed)
    exact = deterministic_differences(ours, impl, batch)
    theirs_batch = d3rlpy_batch(batch)
    lagrange = ours.config.with_lagrange
    mine = draws(lambda: our_draw(ours, batch), trials, seed=1_000_000)
    theirs = draws(lambda: d3rlpy_draw(impl, theirs_batch, lagrange), trials, seed=2_000_000)
    per_state = {"TD target"}
    return exact, {name: agreement(mine[name], theirs[name], independent=name in per_state) for name in mine}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400, help="independent draws per side and case")
    parser.add_argument("--n-actions", type=int, default=10, help="N sampled actions per group (both)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plant", choices=sorted(PLANTS), help="a known mistake put into our CQL-SAC")
    args = parser.parse_args(argv)
    if args.trials < MIN_TRIALS:  # fewer draws: heavier tails than the normal, which |z| < 4 assumes
        parser.error(
            f"--trials {args.trials}: expected at least {MIN_TRIALS} (at 50, Cal-QL's TD target drew a |z| of 4.3)"
        )
    try:
        import d3rlpy
    except ImportError as error:
        raise SystemExit(f"d3rlpy does not import ({error}); its docstring shows how to install it") from None

    quiet_d3rlpy()
    print(
        f"d3rlpy {d3rlpy.__version__}, torch {torch.__version__}; {args.trials} draws a side, N = {args.n_actions}, "
        f"batch {BATCH}, {OBS_DIM}-d states, {ACT_DIM}-d actions, 2 critics of {HIDDEN}, α {ALPHA}, w {CQL_WEIGHT}"
    )
    verdicts = []
    for index, case in enumerate(CASES):
        exact, compared = run_case(
            case, trials=args.trials, n_actions=args.n_actions, seed=args.seed + index, bug=args.plant
        )
        print(f"\n{case.name}")
        print("  without draws, largest |ours − d3rlpy|: " + ", ".join(f"{k} {v:.1e}" for k, v in exact.items()))
        for name, result in compared.items():
            verdict = "agree" if result.agrees() else "DIFFER"
            print(f"  {name:24s} {result.describe()}; means differ by {result.relative_difference:.2%}: {verdict}")
        verdicts.append(all(r.agrees() for r in compared.values()) and max(exact.values()) < 1e-4)
    discrete_verdicts = []
    for index, discrete in enumerate(DISCRETE_CASES):
        differences = run_discrete_case(discrete, seed=args.seed + index)
        agree = max(differences.values()) < 1e-5
        discrete_verdicts.append(agree)
        print(f"\ndiscrete CQL, QR-DQN head ({NUM_QUANTILES} quantiles, {NUM_ACTIONS} actions): {discrete.name}")
        print(
            "  largest |ours − d3rlpy| / largest |d3rlpy|: "
            + ", ".join(f"{name} {value:.1e}" for name, value in differences.items())
            + f": {'agree' if agree else 'DIFFER'}"
        )
    verdicts += discrete_verdicts
    cases = [*CASES, *DISCRETE_CASES]
    expected = [False] * len(CASES) if args.plant else [True] * (len(CASES) - 1) + [False]
    expected += [True] * (len(DISCRETE_CASES) - 1) + [False]
    if args.plant:
        print(f"\nplanted in ours: {PLANTS[args.plant]}")
    print(
        f"\n{'as expected' if verdicts == expected else 'NOT as expected'}: "
        + ", ".join(
            f"{case.name.split(' (')[0]}: {'agree' if v else 'differ'}" for case, v in zip(cases, verdicts, strict=True)
        )
    )
    return 0 if verdicts == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
