"""A trained policy as a file of its own: the framework-free behaviour policy format the dataset
recipes roll out, and ONNX or torch.export programs that run without offline_rl or Tianshou."""
