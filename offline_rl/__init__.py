"""offline_rl: offline reinforcement learning (CQL-SAC, discrete CQL) on Tianshou 2.x."""

__version__ = "0.1.0"
