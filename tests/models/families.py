"""The model families of `make models`: a model type, its task head and the config
overrides applied on top of the generic shrink (tests/models/shrink.py).

Overrides say why when they are not just "small": e.g. a short sliding window so the
windowed mask really cuts the 8-token prompt, or a conv stack short enough for a
1600-sample waveform.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from models import shrink

# The fast slice run by tests/test_models_fast.py (cheap, one per input kind).
FAST = ("llama", "bert", "gpt2", "t5", "vit")


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str
    task: str
    overrides: dict = field(default_factory=dict)
    sdpa: bool = True          # also run the sdpa attention implementation

    def config(self):
        return shrink.shrink_config(self.model_type, **self.overrides)


_LM = dict(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_MOE = dict(num_local_experts=4, num_experts_per_tok=2)

FAMILIES = [
    # decoder-only language models
    Family("llama", "llama", "causal_lm", dict(_LM)),
    Family("qwen2", "qwen2", "causal_lm", dict(_LM)),
    Family("qwen3", "qwen3", "causal_lm", dict(_LM)),
    Family("qwen3_moe", "qwen3_moe", "causal_lm", dict(_LM, num_experts=4, num_experts_per_tok=2,
                                                        moe_intermediate_size=32)),
    Family("gemma", "gemma", "causal_lm", dict(_LM)),
    # sliding_window 4 < prompt length: the windowed mask cuts the prompt
    Family("gemma2", "gemma2", "causal_lm", dict(_LM, sliding_window=4, query_pre_attn_scalar=8)),
    Family("gemma3_text", "gemma3_text", "causal_lm",
           dict(_LM, sliding_window=4, query_pre_attn_scalar=8)),
    Family("mistral", "mistral", "causal_lm", dict(_LM, sliding_window=4)),
    Family("mixtral", "mixtral", "causal_lm", dict(_LM, **_MOE)),
    Family("deepseek_v3", "deepseek_v3", "causal_lm",
           dict(_LM, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                first_k_dense_replace=1, moe_intermediate_size=32, kv_lora_rank=16,
                q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8)),
    Family("phi", "phi", "causal_lm", dict(_LM)),
    Family("phi3", "phi3", "causal_lm", dict(_LM)),
    Family("starcoder2", "starcoder2", "causal_lm", dict(_LM)),
    Family("gpt2", "gpt2", "causal_lm", dict(vocab_size=128, bos_token_id=1, eos_token_id=2)),
    Family("opt", "opt", "causal_lm", dict(_LM, word_embed_proj_dim=32)),
    Family("gpt_neox", "gpt_neox", "causal_lm", dict(_LM)),
    Family("falcon", "falcon", "causal_lm", dict(_LM, new_decoder_architecture=False)),
    # encoders with a masked-LM head
    Family("bert", "bert", "masked_lm"),
    Family("roberta", "roberta", "masked_lm"),
    Family("distilbert", "distilbert", "masked_lm"),
    Family("modernbert", "modernbert", "masked_lm",
           dict(_LM, sep_token_id=3, cls_token_id=4, local_attention=4,
                global_attn_every_n_layers=2)),
    Family("electra", "electra", "masked_lm"),
    Family("albert", "albert", "masked_lm"),
    Family("deberta_v2", "deberta-v2", "masked_lm",
           dict(relative_attention=True, position_buckets=8, max_relative_positions=16)),
    Family("mobilebert", "mobilebert", "masked_lm", dict(num_feedforward_networks=2)),
    # encoder-decoder
    Family("t5", "t5", "seq2seq_lm", dict(vocab_size=128, decoder_start_token_id=0)),
    Family("bart", "bart", "seq2seq_lm", dict(_LM, decoder_start_token_id=2,
                                              forced_eos_token_id=None)),
    Family("whisper", "whisper", "speech_seq2seq",
           dict(vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                decoder_start_token_id=1, max_source_positions=16, num_mel_bins=16,
                begin_suppress_tokens=None, suppress_tokens=None)),
    # vision
    Family("vit", "vit", "image_cls"),
    Family("beit", "beit", "image_cls", dict(use_relative_position_bias=True)),
    Family("swin", "swin", "image_cls", dict(embed_dim=16, window_size=2, depths=[1, 1],
                                             num_heads=[1, 2])),
    Family("convnext", "convnext", "image_cls", dict(hidden_sizes=[8, 16], depths=[1, 1],
                                                     num_stages=2)),
    Family("resnet", "resnet", "image_cls", dict(hidden_sizes=[8, 16], depths=[1, 1],
                                                 embedding_size=8)),
    # vision-language contrastive
    Family("clip", "clip", "contrastive"),
    Family("siglip", "siglip", "contrastive"),
    # speech
    Family("wav2vec2", "wav2vec2", "ctc",
           dict(vocab_size=16, conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3],
                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                ctc_loss_reduction="mean"), sdpa=True),
]

BY_NAME = {f.name: f for f in FAMILIES}
