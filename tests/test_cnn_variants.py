"""The Nature CNN built two ways: as Tianshou builds it (the default, unchanged) and as Dopamine built it
for the DQN Replay agents and the CQL authors' Atari code (`--cnn dopamine`): TensorFlow's 'same'
padding and Dopamine's initialisation. TensorFlow itself (the rlu extra) is the reference for the
padding, so the network is checked against the framework the authors' code ran on."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql.networks import QuantileNatureCNN, same_padding


def test_same_padding_by_hand() -> None:
    # out = ceil(n / s); zeros = (out − 1)·s + k − n, half before and the odd one after.
    assert same_padding(84, 8, 4) == (2, 2)  # 21 positions: 20·4 + 8 − 84 = 4
    assert same_padding(21, 4, 2) == (1, 2)  # 11 positions: 10·2 + 4 − 21 = 3
    assert same_padding(11, 3, 1) == (1, 1)  # 11 positions: 10 + 3 − 11 = 2
    assert same_padding(5, 1, 1) == (0, 0)
    assert same_padding(4, 2, 4) == (0, 0)  # a stride past the kernel needs none


def test_the_nature_variant_is_the_network_it_always_was() -> None:
    """Same modules, same parameter names and the same draws from the same seed as before the setting
    existed, so every checkpoint written before loads and every seeded run repeats."""
    torch.manual_seed(0)
    net = QuantileNatureCNN((4, 84, 84), num_actions=6, num_quantiles=200)
    assert [name for name, _ in net.named_parameters()] == [
        "features.0.weight", "features.0.bias", "features.2.weight", "features.2.bias",
        "features.4.weight", "features.4.bias", "head.0.weight", "head.0.bias", "head.2.weight", "head.2.bias",
    ]  # fmt: skip
    assert net.head[0].in_features == 7 * 7 * 64
    torch.manual_seed(0)
    by_hand = [
        torch.nn.Conv2d(4, 32, 8, 4), torch.nn.Conv2d(32, 64, 4, 2), torch.nn.Conv2d(64, 64, 3, 1),
        torch.nn.Linear(3136, 512), torch.nn.Linear(512, 1200),
    ]  # fmt: skip
    for ours, theirs in zip(net.parameters(), (p for layer in by_hand for p in layer.parameters()), strict=True):
        assert torch.equal(ours, theirs)
    assert DiscreteCQLConfig().cnn == "nature"


def test_the_dopamine_variant_draws_dopamines_initialisation() -> None:
    torch.manual_seed(0)
    net = QuantileNatureCNN((4, 84, 84), num_actions=6, num_quantiles=200, variant="dopamine")
    assert net.head[0].in_features == 11 * 11 * 64
    layers = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    fan_ins = [4 * 8 * 8, 32 * 4 * 4, 64 * 3 * 3, 7744, 512]
    assert [layer.weight[0].numel() for layer in layers] == fan_ins
    for layer, fan_in in zip(layers, fan_ins, strict=True):
        bound = math.sqrt(3 * (1 / math.sqrt(3)) / fan_in)  # VarianceScaling(1/√3, fan_in, uniform)
        weights = layer.weight.detach()
        assert weights.abs().max() <= bound
        assert weights.abs().max() > 0.99 * bound  # the whole range is drawn, not torch's narrower one
        assert weights.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
        assert torch.count_nonzero(layer.bias) == 0
    torch_default = QuantileNatureCNN((4, 84, 84), num_actions=6, num_quantiles=200)
    assert torch_default.features[0].weight.abs().max() <= 1 / math.sqrt(256)  # torch's U(±1/√fan_in)


def test_the_dopamine_variant_computes_what_tensorflows_same_padded_layers_compute() -> None:
    """Dopamine's QuantileNetwork, written with TensorFlow's own ops on NHWC frames: three 'SAME'
    convolutions with ReLU, flattened height-major, a 512-unit ReLU layer, the quantile layer; given our
    network's weights, it gives our logits."""
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is the padding's reference: pip install -e '.[rlu]'")
    torch.manual_seed(1)
    net = QuantileNatureCNN((4, 84, 84), num_actions=3, num_quantiles=5, variant="dopamine")
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    ours = net(frames)[0].detach().numpy().reshape(2, -1)

    convs = [m for m in net.features if isinstance(m, torch.nn.Conv2d)]
    x = tf.constant(frames.numpy().transpose(0, 2, 3, 1).astype(np.float32) / 255.0)
    for conv in convs:
        kernel = conv.weight.detach().numpy().transpose(2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
        x = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=conv.stride[0], padding="SAME") + conv.bias.detach().numpy())
    assert tuple(x.shape) == (2, 11, 11, 64)
    flat = tf.reshape(x, (2, -1))  # (h, w, c) order, as Keras' Flatten leaves it
    first, last = net.head[0], net.head[2]
    # our first dense layer reads (c, h, w) order: the same weights, their columns reordered
    first_kernel = first.weight.detach().numpy().reshape(512, 64, 11, 11).transpose(2, 3, 1, 0).reshape(-1, 512)
    hidden = tf.nn.relu(tf.matmul(flat, first_kernel) + first.bias.detach().numpy())
    theirs = (tf.matmul(hidden, last.weight.detach().numpy().T) + last.bias.detach().numpy()).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_the_setting_reaches_the_algorithms_network_and_its_checkpoint() -> None:
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    algo = CQLQRDQN.build(obs_space, gym.spaces.Discrete(4), DiscreteCQLConfig(cnn="dopamine", num_quantiles=3))
    assert algo.model.head[0].in_features == 7744
    algo = CQLQRDQN.build(obs_space, gym.spaces.Discrete(4), DiscreteCQLConfig(num_quantiles=3))
    assert algo.model.head[0].in_features == 3136
    with pytest.raises(ValueError, match="nature"):
        QuantileNatureCNN((4, 84, 84), 4, 3, variant="keras")


def atari_sized_buffer():
    """Two short episodes of random 84×84 frames, stacked by 4 (the Atari observation), 4 actions."""
    from test_discrete_staging import frame_stack_buffer

    return frame_stack_buffer((84, 84), ((6, True), (9, False)), actions=4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("cnn", ["nature", "dopamine"])
def test_captured_and_eager_updates_agree_with_either_network(cnn: str) -> None:
    """The Dopamine network's padding layer and padded convolutions replay in a CUDA graph as they run
    eagerly: ten updates from the same state give the same losses and parameters."""
    import copy

    from test_discrete_staging import assert_ten_updates_agree

    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    config = DiscreteCQLConfig(cnn=cnn, num_quantiles=8, target_update_freq=4)
    torch.manual_seed(0)
    captured = CQLQRDQN.build(obs_space, gym.spaces.Discrete(4), config, device="cuda")
    eager = copy.deepcopy(captured)
    captured.capture, captured.compile_update, eager.capture = True, False, False
    assert_ten_updates_agree(captured, eager, atari_sized_buffer())


def test_the_dopamine_network_learns_through_the_algorithms_update() -> None:
    from tianshou.algorithm.algorithm_base import policy_within_training_step

    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    torch.manual_seed(0)
    algo = CQLQRDQN.build(obs_space, gym.spaces.Discrete(4), DiscreteCQLConfig(cnn="dopamine", num_quantiles=8))
    before = [p.detach().clone() for p in algo.model.parameters()]
    with policy_within_training_step(algo.policy):
        losses = [algo.update(atari_sized_buffer(), 8).loss for _ in range(3)]
    assert all(np.isfinite(losses))
    assert all(not torch.equal(b, a) for b, a in zip(before, algo.model.parameters(), strict=True))
