"""The ground floor every other part stands on: how a setting is declared, user errors, the private
Tianshou and torch APIs in use, and the machine a process runs on (files written whole, locks,
interrupts, random state, parallel jobs, the cores and memory a process may take, GPU sharing)."""

VERSION = "0.1.0"
"""offline_rl's version, recorded in the files it writes (datasets, exported policies)."""
