"""The values of the settings that choose torch's arithmetic, in a module that does not import torch.

The run settings (`offline_rl.runs.config`) declare their flags with these, and stay torch-free so
that `--help` starts at once; the library modules that act on a choice (`offline_rl.algorithms.layers`)
check against the same tuples without reaching up into the application layer.
"""

from __future__ import annotations

TORCH_MATMUL_PRECISIONS = ("highest", "high", "medium")
"""torch.set_float32_matmul_precision's values; the benchmarks take these."""
MATMUL_PRECISIONS = ("auto", *TORCH_MATMUL_PRECISIONS)
"""A run's `--matmul-precision`: torch's values, or `auto` (`run_config.resolve_matmul_precision`)."""
CPU_PRODUCTS = ("auto", "onednn", "blas")
"""A run's `--cpu-products`: the library of its networks' CPU products (`offline_rl.algorithms.layers`)."""
