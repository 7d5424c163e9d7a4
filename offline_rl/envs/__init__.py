"""Environments: made by id or by a dataset's recorded spec, Atari games by their evaluation protocol,
D4RL's envs rebuilt on today's MuJoCo bindings and Gymnasium-Robotics, and the reference scores that
normalise a return."""
