"""Inference without a datastore: mixing after softmax, the memory-augmented LM, perplexity."""
