"""Generic shrinking of a transformers config and dummy inputs for a task head.

`shrink_config(model_type, **overrides)` starts from the model type's default config
(`AutoConfig.for_model(model_type)`), walks its attributes and nested sub-configs and
replaces sizes by small ones chosen by *name* (hidden sizes, layers, heads, kv heads,
intermediate sizes, vocab, positions, experts, image/patch size, ...), zeroes every
dropout-like probability (random numbers never match between CPU and tpu) and rebuilds
the config through its constructor, so derived values (`head_dim`, layer counts of
conv stacks, ...) are recomputed and the config's own validation runs.

`make_inputs(model, task, ...)` builds a deterministic dummy batch for the head from
`model.main_input_name` and the config: input_ids / pixel_values / input_values /
input_features, decoder inputs for encoder-decoder models, and labels for the loss.
"""
from __future__ import annotations

import re

import torch

HIDDEN = 32
FFN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 8
VOCAB = 128
POSITIONS = 64
IMAGE = 32
PATCH = 8
EXPERTS = 4
NUM_LABELS = 3

# Keys that never go back into a constructor (bookkeeping, or rebuilt from num_labels).
_DROP_KEYS = {"transformers_version", "architectures", "_name_or_path", "id2label",
              "label2id", "dtype", "torch_dtype", "_attn_implementation_autoset",
              "_commit_hash", "auto_map"}

_DIM_RE = re.compile(
    r"(^|_)(hidden_size|d_model|n_embd|n_embed|dim|embed_dim|embedding_size|embedding_dim|"
    r"hidden_dim|d_embed|word_embed_proj_dim|true_hidden_size|intra_bottleneck_size|"
    r"projection_dim|projection_size|proj_dim|pooler_hidden_size|output_hidden_size|"
    r"codevector_dim|proj_codevector_dim|classifier_proj_size|xvector_output_dim|"
    r"text_embed_dim|vision_embed_dim|d_inner|hidden_channels|width)$")
_FFN_RE = re.compile(r"(intermediate|ffn|^d_ff$|^n_inner$|mlp_dim$|feed_forward)")
_MOE_FFN_RE = re.compile(r"(moe|expert)")
_LAYERS_RE = re.compile(
    r"^(num_hidden_layers|num_layers|n_layers?|encoder_layers|decoder_layers|"
    r"num_decoder_layers|num_encoder_layers|depth|num_blocks|num_hidden_blocks)$")
_HEADS_RE = re.compile(r"^(num_attention_heads|num_heads|n_heads?|encoder_attention_heads|"
                       r"decoder_attention_heads|attention_heads|num_attn_heads)$")
_KV_RE = re.compile(r"(key_value_heads|kv_heads)$")
_POS_RE = re.compile(r"^(max_position_embeddings|n_positions|n_ctx|max_target_positions|"
                     r"max_source_positions|max_seq_len|max_sequence_length|seq_length|"
                     r"max_text_len|max_length)$")
_EXPERTS_RE = re.compile(r"^(num_local_experts|num_experts|n_routed_experts|moe_num_experts|"
                         r"num_routed_experts)$")
_TOPK_RE = re.compile(r"^(num_experts_per_tok|moe_topk|num_selected_experts|top_k)$")
_ONE_RE = re.compile(r"^(n_group|topk_group|n_shared_experts|num_shared_experts|"
                     r"first_k_dense_replace)$")
_SMALL_HEAD_RE = re.compile(r"^(head_dim|qk_rope_head_dim|qk_nope_head_dim|v_head_dim|"
                            r"attention_head_size|d_kv|kv_channels|d_head)$")
_RANK_RE = re.compile(r"^(kv_lora_rank|q_lora_rank)$")
_RANDOM_RE = re.compile(r"(drop|mask_time_prob|mask_feature_prob|jitter)")


def _is_subconfig(key, value):
    return isinstance(value, dict) and ("model_type" in value or key.endswith("_config")
                                        or key in ("encoder", "decoder"))


# Attributes that fix a model's geometry (input sizes, positions, conv stacks): the
# second, milder shrink level keeps them, for models whose shapes are interlocked.
_GEOMETRY_RE = re.compile(r"^(image_size|patch_size|num_mel_bins|feature_size|"
                          r"num_conv_pos_embeddings|num_conv_pos_embedding_groups)$")


def _shrink_int(key, v, level, geometry=True):
    """A smaller value for int attribute `key` (default v), or v when the name is unknown."""
    if v <= 0:
        return v
    if not geometry and (_GEOMETRY_RE.match(key) or _POS_RE.match(key)):
        return v
    if _DIM_RE.search(key):
        return min(v, HIDDEN)
    if _MOE_FFN_RE.search(key) and _FFN_RE.search(key):
        return min(v, HIDDEN)
    if _FFN_RE.search(key):
        return min(v, FFN)
    if _LAYERS_RE.match(key):
        return min(v, LAYERS)
    if _HEADS_RE.match(key):
        return min(v, HEADS)
    if _KV_RE.search(key):
        heads = level.get("num_attention_heads") or level.get("num_heads") or v
        return min(v, HEADS) if v >= heads else min(v, KV_HEADS)
    if key.endswith("vocab_size") and key != "type_vocab_size":
        return min(v, VOCAB)
    if _POS_RE.match(key):
        return min(v, POSITIONS)
    if _EXPERTS_RE.match(key):
        return min(v, EXPERTS)
    if _TOPK_RE.match(key):
        return min(v, 2)
    if _ONE_RE.match(key):
        return min(v, 1)
    if _SMALL_HEAD_RE.match(key):
        return min(v, HEAD_DIM)
    if _RANK_RE.match(key):
        return min(v, 16)
    if key == "image_size":
        return min(v, IMAGE)
    if key == "patch_size":
        return min(v, PATCH)
    if key in ("num_mel_bins", "feature_size") and v > 16:
        return 16
    if key == "num_conv_pos_embeddings":
        return min(v, 16)
    if key == "num_conv_pos_embedding_groups":
        return min(v, 4)
    if key in ("num_codevectors_per_group", "num_negatives"):
        return min(v, 8)
    return v


def _shrink_list(key, v):
    if not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return v
    if key in ("hidden_sizes", "embed_dims", "dims", "widths", "num_channels_list",
               "out_channels", "channels"):
        return [8 * 2 ** min(i, 3) for i in range(len(v))]
    if key in ("depths", "num_layers_per_stage", "layers"):
        return [1] * len(v)
    if key in ("num_heads", "num_attention_heads", "heads"):
        base = v[0]
        scaled = [max(1, x // base) for x in v]
        return scaled if all(8 * 2 ** min(i, 3) % h == 0 for i, h in enumerate(scaled)) \
            else [1] * len(v)
    if key in ("conv_dim", "tdnn_dim"):
        return [min(x, HIDDEN) for x in v]
    if key == "image_size":
        return [min(x, IMAGE) for x in v]
    if key == "patch_size":
        return [min(x, PATCH) for x in v]
    return v


def _fix_token_ids(d):
    """Special token ids of the default config may exceed the shrunk vocab: remap them
    to distinct ids at the top of the vocab; drop token lists (suppress_tokens)."""
    vocab = d.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool):
        return
    remap = {}
    for k, v in list(d.items()):
        if not (k.endswith("token_id") or k.endswith("token_ids") or k.endswith("token_index")
                or k.endswith("_tokens")):
            continue
        vals = v if isinstance(v, list) else [v]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
            continue
        if k.endswith("_tokens"):
            d[k] = None if v is None else [x for x in vals if x < vocab] or None
            continue
        new = []
        for x in vals:
            if x >= vocab:
                remap.setdefault(x, vocab - 1 - len(remap))
                x = remap[x]
            new.append(x)
        d[k] = new if isinstance(v, list) else new[0]


def _config_class(model_type):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    return CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None


def _init_fields(cls):
    """Constructor arguments of a (dataclass) config class; None when not a dataclass."""
    import dataclasses
    try:
        return {f.name for f in dataclasses.fields(cls) if f.init}
    except TypeError:
        return None


def _truncate_per_layer(d, out):
    """Per-layer lists (layer_types, ...) follow the shrunk layer count."""
    for k, v in list(out.items()):
        if not isinstance(v, list) or not v:
            continue
        for lk in ("num_hidden_layers", "num_layers", "n_layer", "num_decoder_layers"):
            old, new = d.get(lk), out.get(lk)
            if isinstance(old, int) and isinstance(new, int) and new < old and len(v) == old \
                    and k not in ("depths", "hidden_sizes", "num_heads"):
                out[k] = v[:new]
                break


def shrink_dict(d: dict, cls=None, geometry=True) -> dict:
    """The shrunk copy of one config level (recursing into sub-configs), holding only
    the constructor arguments of `cls` when known (derived values are recomputed).
    geometry=False keeps input sizes, positions and every list (stage layouts)."""
    if cls is None and isinstance(d.get("model_type"), str):
        cls = _config_class(d["model_type"])
    fields = _init_fields(cls) if cls is not None else None
    subs = getattr(cls, "sub_configs", None) or {}
    out = {}
    for k, v in d.items():
        if k in _DROP_KEYS or k in ("out_features", "out_indices", "stage_names"):
            continue
        if fields is not None and k not in fields and k != "model_type":
            continue
        if _is_subconfig(k, v):
            sub_cls = subs.get(k)
            sub_cls = sub_cls if _init_fields(sub_cls) is not None else None
            out[k] = shrink_dict(v, sub_cls, geometry)
        elif isinstance(v, bool) or v is None:
            out[k] = v
        elif isinstance(v, int):
            out[k] = _shrink_int(k, v, d, geometry)
        elif isinstance(v, float):
            out[k] = 0.0 if _RANDOM_RE.search(k) else v
        elif isinstance(v, (list, tuple)):
            out[k] = _shrink_list(k, list(v)) if geometry else v
        else:
            out[k] = v
    _truncate_per_layer(d, out)
    _fix_token_ids(out)
    return out


def _merge(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def shrink_config(model_type: str, num_labels: int = NUM_LABELS, geometry: bool = True,
                  **overrides):
    """A small config of `model_type`; `overrides` (nested dicts for sub-configs) win."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    d = _merge(shrink_dict(default.to_dict(), type(default), geometry), overrides)
    d.pop("model_type", None)
    d.pop("num_labels", None)
    return AutoConfig.for_model(model_type, num_labels=num_labels, **d)


# ---- dummy inputs ----

def _gen(seed):
    g = torch.Generator().manual_seed(seed)
    return g


def _vocab(config):
    for c in (config, getattr(config, "text_config", None), getattr(config, "decoder", None)):
        v = getattr(c, "vocab_size", None) if c is not None else None
        if isinstance(v, int) and v > 0:
            return v
    return VOCAB


def _special_ids(config):
    """Every id the config names (pad/bos/eos, image/video/audio placeholders, ...),
    searched through its sub-configs."""
    ids = set()

    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            elif str(k).endswith(("token_id", "token_ids", "token_index", "_token")):
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(x, int) and not isinstance(x, bool):
                        ids.add(x)

    walk(config.to_dict())
    return ids


def token_ids(config, shape, seed):
    """Random ordinary tokens: never a special id (an eos in the prompt would change
    generate()'s stopping; a pad id would change masks)."""
    vocab = _vocab(config)
    special = _special_ids(config)
    ok = torch.tensor([i for i in range(vocab) if i not in special] or [0])
    idx = torch.randint(0, len(ok), shape, generator=_gen(seed))
    return ok[idx]


def _image_hw(config):
    c = getattr(config, "vision_config", None) or config
    size = getattr(c, "image_size", None) or getattr(c, "input_size", None) or IMAGE
    if isinstance(size, (list, tuple)):
        return int(size[-2]), int(size[-1])
    if isinstance(size, dict):
        return int(size.get("height", IMAGE)), int(size.get("width", IMAGE))
    return int(size), int(size)


def pixel_values(config, batch, seed):
    c = getattr(config, "vision_config", None) or config
    ch = getattr(c, "num_channels", 3) or 3
    h, w = _image_hw(config)
    return torch.randn(batch, ch, h, w, generator=_gen(seed))


def audio_values(config, batch, seed, length=None):
    """Raw waveform: long enough for the conv feature encoder to give >= 8 frames."""
    ratio = 1
    for s in getattr(config, "conv_stride", None) or []:
        ratio *= s
    length = length or max(1600, ratio * 10)
    return torch.randn(batch, length, generator=_gen(seed))


def feature_candidates(config, batch, seed):
    """Plausible input_features layouts (models disagree): tried in order on CPU."""
    g = _gen(seed)
    mel = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or 16
    out = []
    src = getattr(config, "max_source_positions", None)
    if src:
        out.append(torch.randn(batch, mel, 2 * src, generator=g))
    feat = getattr(config, "input_feat_per_channel", None)
    if feat:
        out.append(torch.randn(batch, 32, feat * (getattr(config, "input_channels", 1) or 1),
                               generator=g))
    max_len = getattr(config, "max_length", None)
    out.append(torch.randn(batch, max_len if isinstance(max_len, int) and max_len > 0 else 32,
                           mel, generator=g))
    out.append(torch.randn(batch, mel, 32, generator=g))
    return out
