"""Configuration of the Memory Mosaics v2 model (a transformers ``PretrainedConfig``).

Symbols follow the paper (Zhang & Bottou, "Memory Mosaics at scale", NeurIPS 2025): each block has a
short-term memory over the pairs ``i in [t-h+1, t-1]`` and a long-term memory over ``i in [1, t-m]``, with
``m`` drawn uniformly in ``[long_gap_min, long_gap_max]`` at every training forward and ``long_gap_eval``
at inference (the paper: h = 256, m in [64, 256], 64 at inference, with 4K training contexts).
"""

from __future__ import annotations

from transformers import PretrainedConfig

from mlpmem.errors import ConfigError


class MosaicsConfig(PretrainedConfig):
    """Memory Mosaics v2 hyper-parameters.

    Args:
        vocab_size (int, 4096): tokens of the tokenizer.
        hidden_size (int, 128): residual width d.
        num_hidden_layers (int, 4): blocks.
        num_attention_heads (int, 4): heads per associative memory (short and long each have this many);
            head width = hidden_size // num_attention_heads.
        intermediate_size (int, 344): width of the SwiGLU persistent memory.
        short_window (int, 256): h; the short-term memory of position t holds pairs t-h+1 .. t-1.
        long_gap_min, long_gap_max (int, 64, 256): training range of m; long-term pairs are 1 .. t-m.
        long_gap_eval (int, 64): m at inference.
        rms_norm_eps (float, 1e-5): RMSNorm epsilon (pre-norm blocks and final norm).
        hidden_act (str, "silu"): SwiGLU activation.
        initializer_range (float, 0.02): std of the normal init of linear and embedding weights.
        scan_chunk (int, 32): chunk length of the fast (chunked) key recurrence.
        tie_word_embeddings (bool, True): the LM head shares the input embedding.
    """

    model_type = "memory_mosaics_v2"

    def __init__(self, vocab_size: int = 4096, hidden_size: int = 128, num_hidden_layers: int = 4,
                 num_attention_heads: int = 4, intermediate_size: int = 344, short_window: int = 256,
                 long_gap_min: int = 64, long_gap_max: int = 256, long_gap_eval: int = 64,
                 rms_norm_eps: float = 1e-5, hidden_act: str = "silu", initializer_range: float = 0.02,
                 scan_chunk: int = 32, tie_word_embeddings: bool = True, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.intermediate_size, self.short_window = intermediate_size, short_window
        self.long_gap_min, self.long_gap_max, self.long_gap_eval = long_gap_min, long_gap_max, long_gap_eval
        self.rms_norm_eps, self.hidden_act, self.initializer_range = rms_norm_eps, hidden_act, initializer_range
        self.scan_chunk = scan_chunk
        self.mlp_bias = False  # read by transformers' LlamaMLP, reused as the persistent memory
        self.validate()
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        if min(self.vocab_size, self.hidden_size, self.num_hidden_layers, self.num_attention_heads,
               self.intermediate_size, self.scan_chunk) < 1:
            raise ConfigError("mosaics sizes (vocab, hidden, layers, heads, intermediate, scan_chunk) must be >= 1")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"hidden_size {self.hidden_size} is not divisible by {self.num_attention_heads} heads")
        if self.short_window < 2:
            raise ConfigError(f"short_window h must be >= 2 (it holds h-1 pairs), got {self.short_window}")
        if not 1 <= self.long_gap_min <= self.long_gap_max or self.long_gap_eval < 1:
            raise ConfigError("long gaps need 1 <= long_gap_min <= long_gap_max and long_gap_eval >= 1, got "
                              f"{self.long_gap_min}/{self.long_gap_max}/{self.long_gap_eval}")
