"""Training the memory: the sparse hybrid KL/CE loss, the optimizer, checkpoints, the loop."""
