"""The MLP memory: an attention-free stack of feed-forward blocks from a key to next-token logits."""
