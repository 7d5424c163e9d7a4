"""Discrete CQL with its staged dataset in host memory: batches gathered there and copied ahead."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_discrete_staging import (
    GAMMA,
    N_STEP,
    assert_ten_updates_agree,
    build,
    captured_and_eager,
    frame_stack_buffer,
    plain_buffer,
)
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.discrete_cql import staging
from offline_rl.algorithms.discrete_cql.algorithm import nstep_returns
from offline_rl.algorithms.discrete_cql.host_feed import HostBatchFeed
from offline_rl.algorithms.discrete_cql.staging import StagedTransitions, stage_transitions

CPU = torch.device("cpu")


def staged_on_host(buffer, on_device: bool | None = False) -> StagedTransitions:
    indices = np.asarray(buffer.sample_indices(0))
    returns, bootstrap, last = nstep_returns(buffer, indices, N_STEP, GAMMA)
    staged = stage_transitions(buffer, returns, bootstrap, indices, last, CPU, on_device=on_device)
    assert isinstance(staged, StagedTransitions)
    return staged


def test_staging_says_why_it_stays_in_host_memory() -> None:
    assert staged_on_host(plain_buffer()).host_reason == "kept in host memory as asked"
    assert staged_on_host(plain_buffer(), on_device=None).host_reason is None  # a CPU has no shortfall


def test_each_batch_is_the_next_draw_in_the_same_tensors() -> None:
    """Batch k is `take` of the generator's k-th draw, delivered in the same `inputs` tensors
    every time (a recorded graph reads them at fixed addresses)."""
    staged = staged_on_host(frame_stack_buffer())
    feed = HostBatchFeed(staged, 6, CPU, torch.Generator().manual_seed(5))
    addresses = [part.data_ptr() for part in feed.inputs]
    replay = torch.Generator().manual_seed(5)
    for _ in range(4):
        batch = feed.advance()
        expected = staged.take(torch.randint(len(staged), (6,), generator=replay))
        for got, want in zip(batch, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert [part.data_ptr() for part in batch] == addresses
        feed.prefetch()


def test_host_fed_updates_are_the_updates_on_those_batches() -> None:
    """Four updates fed from host memory leave the network exactly as four updates on the same rows
    taken from the device-staged dataset do."""
    buffer = plain_buffer()
    fed = build((4,))
    reference = copy.deepcopy(fed)
    fed.dataset_on_device = False
    torch.manual_seed(7)
    with policy_within_training_step(fed.policy):
        for _ in range(4):
            fed.update(buffer, 5)
    torch.manual_seed(7)  # the feed seeds its generator from torch's
    rows = torch.Generator().manual_seed(int(torch.randint(2**62, (1,))))
    staged = reference.staged(buffer)
    assert isinstance(staged, StagedTransitions) and staged.host_reason is None
    for _ in range(4):
        reference.gradient_step(staged.take(torch.randint(len(staged), (5,), generator=rows)))
    assert int(fed.num_updates) == int(reference.num_updates) == 4
    expected = reference.state_dict()
    for name, value in fed.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0, msg=name)


def test_the_feed_is_made_once_per_staging_and_batch_size() -> None:
    fed = build((4,))
    fed.dataset_on_device = False
    buffer = plain_buffer()
    with policy_within_training_step(fed.policy):
        fed.update(buffer, 5)
        feed = fed._feed
        fed.update(buffer, 5)
        assert fed._feed is feed
        fed.update(buffer, 4)
        assert fed._feed is not feed and fed._feed.batch_size == 4
        feed = fed._feed
        fed.update(plain_buffer(), 4)  # another buffer: staged afresh, so a new feed
        assert fed._feed is not feed and fed._feed.host is fed._staged


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and copy streams need a CUDA device")
def test_a_dataset_too_big_for_the_gpu_is_fed_from_host_memory_and_still_captured(monkeypatch, capsys) -> None:
    """With no GPU memory to spare the dataset stays on the host, the update is still one replayed
    graph, and it does what the eager update fed the same batches does (target copies included)."""
    monkeypatch.setattr(staging, "DEVICE_MEMORY_SHARE", 0.0)
    captured, eager = captured_and_eager()
    eager.dataset_on_device = False
    assert_ten_updates_agree(captured, eager, plain_buffer())
    assert "do not fit" in captured._staged.host_reason and "dataset: in host memory" in capsys.readouterr().out
    assert captured._feed.inputs[0].is_cuda and captured._feed._gathered[0].is_pinned()
