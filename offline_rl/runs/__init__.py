"""A training run and what surrounds it: the session (device, threads, seeds, resume), the run folder
with its checkpoints and summary, evaluation, videos, loggers, and datasets made by playing a policy."""
