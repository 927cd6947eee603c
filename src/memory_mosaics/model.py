"""Memory Mosaics v2 as a transformers model: ``MosaicsModel`` (the stack) and ``MosaicsForCausalLM``.

Structured like Llama (``model.model.layers[i].mlp``, ``model.model.norm``, ``model.lm_head``) so that
``mlpmem.backbone`` finds its layers and feed-forward blocks and an MLP Memory can attach to it.
Documents: ``document_ids`` (B, T) separate packed documents (no recurrence or retrieval crosses them);
``attention_mask`` zeros (padding) become one-token documents of their own, so they are never retrieved.
There is no incremental cache: every ``generate`` step recomputes the whole prefix (fine at our sizes).

Importing this module registers the ``memory_mosaics_v2`` model type with transformers' ``AutoConfig`` and
``AutoModelForCausalLM``, so a saved model folder loads by path like any causal LM.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from memory_mosaics.block import MosaicsBlock
from memory_mosaics.config import MosaicsConfig
from memory_mosaics.memory_layers import (
    AssociativeMemory,
    long_term_mask,
    short_term_mask,
)


def document_ids_from(input_ids, document_ids=None, attention_mask=None) -> torch.Tensor:
    """(B, T) document ids: given ones (or all 0), with every padded position made its own document."""
    B, T = input_ids.shape
    doc = torch.zeros(B, T, dtype=torch.long, device=input_ids.device) if document_ids is None else document_ids
    if attention_mask is not None:
        lone = -1 - torch.arange(T, device=input_ids.device).expand(B, T)  # distinct negative ids
        doc = torch.where(attention_mask.bool(), doc.long(), lone)
    return doc


class MosaicsPreTrainedModel(PreTrainedModel):
    config_class = MosaicsConfig
    base_model_prefix = "model"
    _no_split_modules = ["MosaicsBlock"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, LlamaRMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, AssociativeMemory):
            module.reset_memory_parameters()


class MosaicsModel(MosaicsPreTrainedModel):
    def __init__(self, config: MosaicsConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(MosaicsBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def long_gap(self, override: int | None = None) -> int:
        """m: the override, else a uniform draw in [long_gap_min, long_gap_max] in training, else long_gap_eval."""
        if override is not None:
            return int(override)
        if self.training:
            return int(torch.randint(self.config.long_gap_min, self.config.long_gap_max + 1, ()).item())
        return self.config.long_gap_eval

    def forward(self, input_ids=None, attention_mask=None, document_ids=None, inputs_embeds=None,
                long_gap: int | None = None, reference: bool = False, **kwargs) -> BaseModelOutput:
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, d)
        ids = input_ids if input_ids is not None else x[..., 0]
        doc = document_ids_from(ids, document_ids, attention_mask)
        short_mask = short_term_mask(doc, self.config.short_window)  # (B, T, T), shared by all layers
        long_mask = long_term_mask(doc, self.long_gap(long_gap))
        for layer in self.layers:
            x = layer(x, doc, short_mask, long_mask, reference)
        return BaseModelOutput(last_hidden_state=self.norm(x))


class MosaicsForCausalLM(MosaicsPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MosaicsConfig):
        super().__init__(config)
        self.model = MosaicsModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, document_ids=None, labels=None, inputs_embeds=None,
                long_gap: int | None = None, reference: bool = False, logits_to_keep: int = 0,
                **kwargs) -> CausalLMOutput:
        """Next-token logits; with ``labels`` (B, T) also the mean shifted cross-entropy (-100 ignored)."""
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, document_ids=document_ids,
                            inputs_embeds=inputs_embeds, long_gap=long_gap, reference=reference).last_hidden_state
        keep = slice(-logits_to_keep, None) if logits_to_keep else slice(None)
        logits = self.lm_head(hidden[:, keep])  # (B, T_keep, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        """No cache: every step sees the whole prefix."""
        return {"input_ids": input_ids, "attention_mask": attention_mask, "logits_to_keep": 1}

    def _supports_default_dynamic_cache(self) -> bool:  # noqa: D401 - transformers hook
        return False


AutoConfig.register(MosaicsConfig.model_type, MosaicsConfig, exist_ok=True)
AutoModelForCausalLM.register(MosaicsConfig, MosaicsForCausalLM, exist_ok=True)
