"""The algorithms as Tianshou `OfflineAlgorithm`s (CQL-SAC, discrete CQL on a QR-DQN head, fitted Q
evaluation), the engine they share (staging a dataset on the device, the captured update, statistics
windows, the trainer), Tianshou's drop-in constructors, and a trained policy exported as a file."""
