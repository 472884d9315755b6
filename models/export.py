#!/usr/bin/python3
"""Export the seed attention modules to ONNX with reference test data.

Usage (from the repository root):

    /usr/bin/python3 models/export.py              # writes models/<name>/...
    /usr/bin/python3 models/export.py --only NAME  # exports NAME only; the other models' files
                                                   # are re-checked as they are, not rewritten
    /usr/bin/python3 models/export.py --bench DIR  # big seed-000 models and a 12-layer encoder, no test data (existing ones kept)
    /usr/bin/python3 models/export.py --intermediates [--only NAME]  # PyTorch's attention
                                                   # weights beside data set 0, nothing else

Needs Debian's PyTorch and ONNX for the system Python:
    apt-get install python3-torch python3-onnx python3-numpy
(torch 1.13, onnx 1.12, numpy).

For every model it writes

    models/<name>/model.onnx
    models/<name>/test_data_set_N/input_K.pb, output_0.pb

in the layout of ONNX's backend test data: each .pb is a serialized
TensorProto whose name is the graph input/output name, holding the PyTorch
eager result. Data set 0 uses the export shapes; the others use other batch
and sequence sizes wherever those axes are dynamic.

After exporting, each model is checked with onnx.checker, reloaded, and run
through a small numpy interpreter of the ONNX ops it uses (onnx 1.12 has no
onnx.reference); the result must match PyTorch. models/README.md is
regenerated from the exported graphs (with --only, the rows of the models not
exported are rebuilt from their committed files: graph summary, and the
numpy interpreter re-run on their committed test data).
"""

import argparse
import collections
import glob
import json
import math
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep models/ free of __pycache__
sys.path.insert(0, HERE)

import attention_modules as am  # noqa: E402

OPSET = 17


# ---------------------------------------------------------------------------
# input generators: each takes (rng, shape) and returns a numpy array
# ---------------------------------------------------------------------------


def randn(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _lengths(rng, b, s):
    """Valid lengths per batch row, in [1, s]; at least one row is padded when s > 1."""
    lens = rng.integers(1, s + 1, size=b)
    if s > 1 and (lens == s).all():
        lens[0] = max(1, s // 2)
    return lens


def pad_mask_bool(rng, shape):
    """(B, S) bool, True = padding; right-padded, never fully masked."""
    b, s = shape
    lens = _lengths(rng, b, s)
    return np.arange(s)[None, :] >= lens[:, None]


def keep_mask_int_2d(rng, shape):
    """(B, S) int64, 1 = keep, 0 = padding (seed 002 SelfAttention_Final)."""
    return (~pad_mask_bool(rng, shape)).astype(np.int64)


def keep_mask_int_bss(rng, shape):
    """(B, S, S) int64 from a (B, S) padding mask, unsqueeze(1).repeat(1, S, 1) as in seed 002."""
    b, s, s2 = shape
    assert s == s2
    keep = (~pad_mask_bool(rng, (b, s))).astype(np.int64)
    return np.repeat(keep[:, None, :], s, axis=1)


def keep_mask_int_b1ss(rng, shape):
    """(B, 1, S, S) int64: padding mask broadcast over heads (seed 002 MultiHeadAttention)."""
    b, one, s, s2 = shape
    return keep_mask_int_bss(rng, (b, s, s2))[:, None, :, :]


def causal_mask_bool(rng, shape):
    """(S, S) bool, True above the diagonal (seed 003: tril(ones) == 0)."""
    s, s2 = shape
    return np.triu(np.ones((s, s2), dtype=bool), k=1)


def keep_mask_bool(rng, shape):
    """(B, S) bool, True = keep; right-padded, never fully masked."""
    return ~pad_mask_bool(rng, shape)


def pad_mask_bool_1d(rng, shape):
    """(S,) bool, True = padding, for an unbatched sequence; never fully masked."""
    return pad_mask_bool(rng, (1, shape[0]))[0]


def keep_mask_float(rng, shape):
    """(B, S) float32, 1 = keep, 0 = padding (GPT-2's attention_mask)."""
    return (~pad_mask_bool(rng, shape)).astype(np.float32)


def position_ids(rng, shape):
    """(B, S) int64: each row consecutive positions from a random start in [0, 16)."""
    b, s = shape
    return rng.integers(0, 16, size=(b, 1)) + np.arange(s)[None, :]


def left_keep_mask_int(rng, shape):
    """(B, S) int64, 1 = keep, 0 = padding, LEFT-padded as in batched
    generation: row 0 unpadded, the others padded by 1 to S - 1 positions
    (their first query rows see only padding: fully masked rows)."""
    b, s = shape
    pads = np.zeros(b, dtype=np.int64)
    if s > 1:
        pads[1:] = rng.integers(1, s, size=b - 1)
    return (np.arange(s)[None, :] >= pads[:, None]).astype(np.int64)


def espnet_keep_mask(rng, shape):
    """(B, 1, S) bool, True = a valid frame (ESPnet's make_non_pad_mask);
    with B >= 2 the first batch row is all padding, so its query rows see
    no key (ESPnet's weights zeroing then gives them 0)."""
    b, _, s = shape
    lens = _lengths(rng, b, s)
    if b >= 2:
        lens[0] = 0
    return (np.arange(s)[None, :] < lens[:, None])[:, None, :]


def swin_shift_mask(rng, shape):
    """(nW, N, N) float32 0 / -100: the shifted-window attention mask of Swin
    Transformer's SwinTransformerBlock (shift = window // 2) for an image of
    nW windows of N = window² tokens, the windows on a grid as near square as
    nW allows. Deterministic (rng unused): a token only sees the tokens of
    its own region of the shifted image."""
    nw, n, n2 = shape
    ws = int(round(math.sqrt(n)))
    assert ws * ws == n == n2, shape
    rows = max(r for r in range(1, nw + 1) if nw % r == 0 and r * r <= nw)
    cols, shift = nw // rows, ws // 2
    img = np.zeros((rows * ws, cols * ws), np.float32)
    cnt = 0
    for h in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
        for w in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            img[h, w] = cnt
            cnt += 1
    # window_partition: (rows·ws, cols·ws) -> (nW, ws·ws), windows row-major
    windows = img.reshape(rows, ws, cols, ws).transpose(0, 2, 1, 3).reshape(nw, n)
    diff = windows[:, None, :] - windows[:, :, None]
    return np.where(diff != 0, np.float32(-100.0), np.float32(0.0)).astype(np.float32)


def head_mask_keep(rng, shape):
    """(H,) float 1.0 / 0.0 (BERT's head_mask: 0 prunes a head), one head pruned."""
    m = np.ones(shape, dtype=np.float32)
    m[rng.integers(0, shape[0])] = 0.0
    return m


def random_mask_bool(rng, shape):
    """(Tq, Tk) bool, True = masked, about 30% masked, column 0 never masked."""
    m = rng.random(shape) < 0.3
    m[:, 0] = False
    return m


# ---------------------------------------------------------------------------
# model specs
# ---------------------------------------------------------------------------

C = 32      # hidden size for most models
H = 4       # heads
CTX = 64    # context size for seed 000 CausalAttention

Spec = collections.namedtuple(
    "Spec", "name seed module build inputs outputs datasets notes dim_params opset bf16",
    defaults=(None, OPSET, None))
# inputs: list of (name, shape (ints or axis names), generator, dtype label)
# outputs: list of (name, shape)
# datasets: list of {axis name: size}; the first is the export shape
# dim_params: {axis name: dim_param name} where the exported name differs
#   from the axis name (two axes of independent sizes exported under one name)
# opset: the opset_version passed to torch.onnx.export (OPSET unless a model
#   stands for the older exports users make; see at_opset)
# bf16: for a model whose own numerics amplify bf16's rounding past
#   conform.BF16Tolerance, {"rtol", "atol", "why"}: written, with PyTorch's own
#   bf16 error on data set 0 (CPU autocast) measured at export, as
#   bf16_tolerance.json, which `attnrun conform --precision bf16` holds the
#   model to instead (and says why)


def _std_sets(**extra):
    sets = [dict(batch=2, seq=7), dict(batch=3, seq=12), dict(batch=1, seq=1)]
    for s in sets:
        s.update(extra)
    return sets


# seed 001's CrossAttention: decoder x, encoder enc and its padding mask
CROSS_INPUTS = [("x", ("batch", "seq", C), randn), ("enc", ("batch", "enc_seq", C), randn),
                ("enc_mask", ("batch", "enc_seq"), pad_mask_bool)]


# The left-padded LLaMA attentions' inputs, outputs and data set shapes.
_LLAMA_PADDED_IO = (
    [("x", ("batch", "seq", 64), randn), ("attention_mask", ("batch", "seq"), left_keep_mask_int)],
    [("y", ("batch", "seq", 64))],
    [dict(batch=3, seq=7), dict(batch=4, seq=12), dict(batch=1, seq=1)],
)

SPECS = [
    # seed 000
    Spec("s000_single_head", "000", "SingleHeadAttention(hidden_size=32)",
         lambda: am.SingleHeadAttention(C),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "fused Wqkv, head size C/4 = 8; unbind exports as Split + Squeeze"),
    Spec("s000_multi_head", "000", "MultiHeadAttention(hidden_size=32, num_heads=4)",
         lambda: am.S000MultiHeadAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "fused Wqkv, reshape (B,S,3,NH,HS) + transpose(3,1)"),
    Spec("s000_causal", "000", "CausalAttention(hidden_size=32, num_heads=4, context_size=64)",
         lambda: am.CausalAttention(C, H, CTX),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=7), dict(batch=3, seq=12), dict(batch=2, seq=CTX)],
         "mask: True = padding. `causal_mask + mask` is an ONNX Add on tensor(bool) "
         "(logical or in PyTorch), which ONNX Runtime refuses to load. The causal_mask "
         "buffer is a (1,1,64,64) bool initializer (raw_data, 1 byte per bool), "
         "sliced to S with Slice; seq must be <= 64"),
    Spec("s000_causal_or", "000*", "CausalAttention with `|` instead of `+` (not in seed)",
         lambda: am.CausalAttentionOr(C, H, CTX),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=7), dict(batch=3, seq=12), dict(batch=2, seq=CTX)],
         "same weights and outputs as s000_causal, but exports Or, so ONNX Runtime loads it"),
    # seed 002
    Spec("s002_self_attention_v1", "002", "SelfAttention_V1(hidden_dim=32)",
         lambda: am.SelfAttention_V1(C),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "separate q/k/v Linear, no output projection"),
    Spec("s002_self_attention_v2", "002", "SelfAttention_V2(hidden_dim=32)",
         lambda: am.SelfAttention_V2(C),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "fused qkv Linear + torch.split (Split with a split input)"),
    Spec("s002_self_attention_v3", "002", "SelfAttention_V3(dim=32)",
         lambda: am.SelfAttention_V3(C),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq", "seq"), keep_mask_int_bss)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "mask: int64 (B,S,S), 0 = masked; masked_fill(mask==0, -1e20) -> Equal + Where"),
    Spec("s002_self_attention_final", "002", "SelfAttention_Final(dim=32)",
         lambda: am.SelfAttention_Final(C),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "mask: int64 (B,S), 0 = padding; unsqueeze(1).repeat(1,S,1) -> Unsqueeze + Tile; fill -inf"),
    Spec("s002_multi_head", "002", "MultiHeadAttention(dim=32, num_head=4)",
         lambda: am.S002MultiHeadAttention(C, H),
         [("query", ("batch", "seq", C), randn), ("key", ("batch", "seq", C), randn),
          ("value", ("batch", "seq", C), randn),
          ("mask", ("batch", 1, "seq", "seq"), keep_mask_int_b1ss)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "mask: int64 (B,1,S,S), 0 = masked (the seed's (B,S,S) mask only broadcasts when B == heads). "
         "Seed quirks: scale 1/sqrt(num_head); key/value reshaped with the query length"),
    # seed 003 (2-D inputs: (seq, d_model))
    Spec("s003_self_attention", "003", "SelfAttention(d_model=32, row_dim=0, col_dim=1)",
         lambda: am.S003SelfAttention(C, 0, 1),
         [("x", ("seq", C), randn)],
         [("y", ("seq", C))],
         [dict(seq=7), dict(seq=12), dict(seq=1)],
         "2-D input (no batch), Linear without bias -> MatMul with a transposed initializer"),
    Spec("s003_masked_self_attention", "003", "MaskedSelfAttention(d_model=32, row_dim=0, col_dim=1)",
         lambda: am.MaskedSelfAttention(C, 0, 1),
         [("x", ("seq", C), randn), ("mask", ("seq", "seq"), causal_mask_bool)],
         [("y", ("seq", C))],
         [dict(seq=7), dict(seq=12), dict(seq=1)],
         "mask: bool (S,S), True = masked (causal: tril(ones)==0); fill -1e9"),
    Spec("s003_attention", "003", "Attention(d_model=32, row_dim=0, col_dim=1)",
         lambda: am.Attention(C, 0, 1),
         [("query", ("seq_q", C), randn), ("key", ("seq_kv", C), randn),
          ("value", ("seq_kv", C), randn), ("mask", ("seq_q", "seq_kv"), random_mask_bool)],
         [("y", ("seq_q", C))],
         [dict(seq_q=5, seq_kv=9), dict(seq_q=11, seq_kv=3), dict(seq_q=1, seq_kv=1)],
         "separate q/k/v encodings (query length may differ from key/value length); "
         "mask: bool (Tq,Tk), True = masked, fill -1e9"),
    Spec("s003_multi_head_modulelist", "003", "MultiHeadAttention(d_model=16, row_dim=0, col_dim=1, num_heads=4)",
         lambda: am.S003MultiHeadAttention(16, 0, 1, num_heads=4),
         [("query", ("seq_q", 16), randn), ("key", ("seq_kv", 16), randn),
          ("value", ("seq_kv", 16), randn)],
         [("y", ("seq_q", 64))],
         [dict(seq_q=5, seq_kv=9), dict(seq_q=11, seq_kv=3), dict(seq_q=1, seq_kv=1)],
         "4 independent heads of width d_model=16 (not split), concatenated: output width 64, no output projection"),
    # seed 004
    Spec("s004_param_free", "004", "softmax(bmm(x, xᵀ)) x (no parameters)",
         lambda: am.ParamFreeSelfAttention(),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "no initializers; x feeds Transpose and both MatMuls; no scaling"),
    Spec("s004_multi_head_bmm", "004", "SelfAttention(k=32, heads=4, mask=False)",
         lambda: am.S004SelfAttention(C, 4, mask=False),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "heads folded into the batch: view(b*h, t, s) + bmm; scale 1/sqrt(k) (full width)"),
    Spec("s004_multi_head_bmm_causal", "004*", "SelfAttention(k=32, heads=4, mask=True) (mask path not in seed)",
         lambda: am.S004SelfAttention(C, 4, mask=True),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "the seed's forward ignores `mask`; this variant adds the reference's causal mask "
         "(triu of ones built at run time -> ConstantOfShape + Trilu)"),
    # seed 001
    Spec("s001_cross_attention", "001", "CrossAttention(hidden_size=32, num_heads=4)",
         lambda: am.CrossAttention(C, H),
         CROSS_INPUTS,
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5, enc_seq=9), dict(batch=3, seq=11, enc_seq=4), dict(batch=1, seq=1, enc_seq=1)],
         "decoder queries (B,T,C) attend to encoder keys/values (B,S,C); enc_mask: bool, True = padding, fill -inf"),
    Spec("s001_cross_attention_nomask", "001", "CrossAttention(hidden_size=32, num_heads=4), no mask",
         lambda: am.CrossAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("enc", ("batch", "enc_seq", C), randn)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5, enc_seq=9), dict(batch=3, seq=11, enc_seq=4), dict(batch=1, seq=1, enc_seq=1)],
         "as s001_cross_attention without the key padding mask"),
    Spec("s001_decoder_self_attention", "001", "DecoderSelfAttention(hidden_size=32, num_heads=4)",
         lambda: am.DecoderSelfAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "masked (causal) decoder self-attention, mask built from the run-time length (Trilu); no context limit"),
    Spec("s001_cross_attention_shared_dim", "001", "CrossAttention(hidden_size=32, num_heads=4), one dim_param for two lengths",
         lambda: am.CrossAttention(C, H),
         CROSS_INPUTS,
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5, enc_seq=9), dict(batch=3, seq=11, enc_seq=4), dict(batch=1, seq=1, enc_seq=3)],
         "as s001_cross_attention, but dynamic_axes names both the decoder and the encoder length `S`, "
         "an exporter's mistake seen in the wild: the graph says x and enc have one length, the data sets "
         "give them different ones (ONNX Runtime runs them)",
         dim_params=dict(seq="S", enc_seq="S")),
    # PyTorch's nn.MultiheadAttention (issue 12: its add_bias_kv / add_zero_attn forms export Pad)
    Spec("torch_mha_bias_kv", "torch", "nn.MultiheadAttention(32, 4, batch_first=True, add_bias_kv=True)",
         lambda: am.TorchMultiheadAttention(C, H, add_bias_kv=True),
         [("x", ("batch", "seq", C), randn), ("key_padding_mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "learned bias_k/bias_v rows appended to the keys and values (Concat); key_padding_mask: bool, "
         "True = padding, padded by one kept column (Pad on bool)"),
    Spec("torch_mha_zero_attn", "torch", "nn.MultiheadAttention(32, 4, batch_first=True, add_zero_attn=True)",
         lambda: am.TorchMultiheadAttention(C, H, add_zero_attn=True),
         [("x", ("batch", "seq", C), randn), ("key_padding_mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "a zero key/value row appended after the projections (Concat of zeros); key_padding_mask: bool, "
         "True = padding, padded by one kept column (Pad on bool)"),
    # a small encoder stack: 2 layers x 4 heads, for attention maps per layer and head
    Spec("s001_encoder_2x4", "001*", "EncoderStack(hidden_size=32, num_heads=4, num_layers=2) (not in seed)",
         lambda: am.EncoderStack(C, H, 2),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "2 pre-norm encoder layers (LayerNorm, fused Wqkv, 4 heads, key padding mask with -inf, GELU MLP, residuals); "
         "mask: bool, True = padding"),
    # Attention as real exports spell it (issue 13): PyTorch's own modules and re-implementations
    # of T5-, LLaMA-, GPT-2- and Whisper-style attention; exported with --only, leaving the
    # other models' files as they were.
    Spec("torch_mha_need_weights", "torch", "nn.MultiheadAttention(32, 4, batch_first=True), need_weights=True",
         lambda: am.TorchMHAWeights(C, H, need_weights=True),
         [("x", ("batch", "seq", C), randn), ("key_padding_mask", ("batch", "seq"), pad_mask_bool),
          ("attn_mask", ("seq", "seq"), causal_mask_bool)],
         [("y", ("batch", "seq", C)), ("weights", ("batch", "seq", "seq"))],
         _std_sets(),
         "returns the attention weights averaged over the heads (the softmax output is also read by "
         "Reshape + ReduceSum + Div); bool key_padding_mask and causal attn_mask (True = masked), merged "
         "with Or and turned into a float -inf mask (Where) added to the scores (baddbmm)"),
    Spec("torch_mha_float_mask", "torch", "nn.MultiheadAttention(32, 4, batch_first=True), float attn_mask",
         lambda: am.TorchMHAWeights(C, H, need_weights=False),
         [("x", ("batch", "seq", C), randn), ("key_padding_mask", ("batch", "seq"), pad_mask_bool),
          ("attn_mask", ("seq", "seq"), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "need_weights=False with a float (additive) attn_mask; the bool key_padding_mask is folded into it "
         "with Where(-inf)"),
    Spec("torch_mha_unbatched", "torch", "nn.MultiheadAttention(32, 4) on unbatched (2-D) inputs",
         lambda: am.TorchMHAUnbatched(C, H),
         [("x", ("seq", C), randn), ("memory", ("mem_seq", C), randn),
          ("key_padding_mask", ("mem_seq",), pad_mask_bool_1d)],
         [("y", ("seq", C))],
         [dict(seq=5, mem_seq=9), dict(seq=11, mem_seq=4), dict(seq=1, mem_seq=1)],
         "queries (T, C) attend to a memory (S, C) with a key padding mask (S,); PyTorch unsqueezes a batch of 1"),
    Spec("torch_encoder_layer", "torch", "nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64), 1)",
         lambda: am.TorchEncoderLayer(C, H, 64),
         [("x", ("seq", "batch", C), randn), ("src_key_padding_mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("seq", "batch", C))],
         _std_sets(),
         "post-norm encoder layer, sequence-first (batch_first=True takes torch 1.13's fused fast path, "
         "which has no ONNX export); src_key_padding_mask: bool, True = padding"),
    Spec("torch_decoder_layer", "torch", "nn.TransformerDecoderLayer(32, 4, 64, batch_first=True)",
         lambda: am.TorchDecoderLayer(C, H, 64),
         [("tgt", ("batch", "seq", C), randn), ("memory", ("batch", "mem_seq", C), randn),
          ("tgt_key_padding_mask", ("batch", "seq"), pad_mask_bool),
          ("memory_key_padding_mask", ("batch", "mem_seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5, mem_seq=9), dict(batch=3, seq=11, mem_seq=4), dict(batch=1, seq=1, mem_seq=1)],
         "masked self-attention (float causal mask of generate_square_subsequent_mask, built at run time, "
         "plus tgt_key_padding_mask) and cross-attention (memory_key_padding_mask); masks bool, True = padding"),
    Spec("t5_attention", "ext", "T5-style self-attention (transformers' T5Attention, encoder)",
         lambda: am.T5Attention(C, H, 8),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "no 1/sqrt(d) scaling; learned relative position bias (bidirectional buckets from Range, Log, Where, "
         "Gather on the run-time length) plus the padding mask ((1 - mask)·finfo.min) added to the scores; "
         "`scores.float()` before the softmax (Cast); mask: int64, 1 = keep"),
    Spec("t5_encoder", "ext", "transformers' T5Stack encoder of 2 T5Blocks sharing one position bias",
         lambda: am.T5EncoderStack(C, H, 8, 64, 2),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "the first layer's relative position bias plus the padding mask ((1 - mask)·finfo.min), computed "
         "once and added to both layers' scores (one Add read by two attentions); T5LayerNorm (RMS) "
         "before each sublayer, ReLU feed-forward, residual sums, final norm; mask: int64, 1 = keep"),
    Spec("llama_attention_opset17", "ext", "LLaMA-style decoder block at opset 17 (GQA 4/2 heads, KV cache)",
         lambda: am.LlamaAttentionBlock(),
         [("x", ("batch", "seq", 64), randn), ("position_ids", ("batch", "seq"), position_ids),
          ("past_key", ("batch", 2, "past", 16), randn), ("past_value", ("batch", 2, "past", 16), randn)],
         [("y", ("batch", "seq", 64)), ("present_key", ("batch", 2, "total", 16)),
          ("present_value", ("batch", 2, "total", 16))],
         [dict(batch=2, seq=7, past=5), dict(batch=1, seq=1, past=12), dict(batch=3, seq=4, past=0)],
         "as transformers' LlamaDecoderLayer exports: RMSNorm in Pow/ReduceMean/Sqrt/Div, rotary embedding "
         "(Cos, Sin, rotate_half by Slice/Neg/Concat), repeat_kv by Unsqueeze + Expand + Reshape, an additive "
         "causal mask built at run time (finfo.min, offset by the cache), softmax in float32 then `.to(q.dtype)` "
         "(Casts after the Softmax), SwiGLU MLP"),
    Spec("llama_padded_attention", "ext",
         "LLaMA-style attention with a left-padded attention_mask (GQA 4/2 heads, finfo.min masks)",
         lambda: am.LlamaPaddedAttention(),
         *_LLAMA_PADDED_IO,
         "as transformers' LlamaAttention (eager) with _prepare_4d_causal_attention_mask: causal finfo.min "
         "(Trilu), then masked_fill of the padded keys with finfo.min (Where), added to the scores; positions "
         "cumsum(mask) - 1 (CumSum) for the rotary embedding; attention_mask: int64, 1 = keep, LEFT padding, "
         "so the first query rows of a padded row see no key and take the mean of V (uniform softmax over all keys)"),
    Spec("llama_padded_attention_add", "ext",
         "llama_padded_attention with transformers 4.30-4.35's mask: padding added to the causal mask",
         lambda: am.LlamaPaddedAttention(combine="add"),
         *_LLAMA_PADDED_IO,
         "as transformers 4.30-4.35's LlamaAttention: _expand_mask (1 - mask, masked_fill with finfo.min) ADDED "
         "to the causal finfo.min mask (_prepare_decoder_attention_mask), so keys both hide are -inf; LEFT "
         "padding: a first query row of a padded row is uniform over the keys past its diagonal that are not "
         "padding"),
    Spec("llama_update_causal_mask", "ext",
         "LLaMA-style attention with transformers 4.44's _update_causal_mask (GQA 4/2 heads, left padding)",
         lambda: am.LlamaUpdateCausalMask(),
         *_LLAMA_PADDED_IO,
         "as transformers 4.38-4.47's LlamaAttention (eager) without a KV cache: cache_position = arange(S); "
         "the finfo.min causal mask by full, triu and a comparison with cache_position, expanded and "
         "cloned; the padding written in by a slice assignment over the whole length (ScatterND with an "
         "index tensor of every position); attention_mask: int64, 1 = keep, LEFT padding"),
    Spec("gpt2_attention", "ext", "GPT-2-style attention (transformers' original GPT2Attention, n_ctx=64)",
         lambda: am.GPT2Attention(C, H, CTX),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_float)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "Conv1D projections as addmm (Gemm on a 2-D view); K split already transposed; causal uint8 buffer "
         "sliced and applied with Where and a -1e4 masked_bias, then (1 - mask)·-10000 added; seq must be <= 64"),
    Spec("gpt2_block", "ext", "GPT-2's block (transformers' GPT2Block: ln_1, GPT2Attention, ln_2, GPT2MLP, n_ctx=64)",
         lambda: am.GPT2Block(C, H, CTX),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_float)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "pre-norm: LayerNorm, gpt2_attention's graph, residual Add, LayerNorm, MLP of Conv1D c_fc (Gemm, inner "
         "4·32) -> gelu_new -> Conv1D c_proj, residual Add; gelu_new (transformers' NewGELUActivation) exports as "
         "Mul, Pow(x, 3), Mul, Add, Mul, Tanh, Add, Mul; trained-size weights (LayerNorms not the identity, c_fc "
         "outputs of a few units, so the tanh saturates); seq must be <= 64"),
    Spec("whisper_attention", "ext", "Whisper-style causal self-attention (openai/whisper MultiHeadAttention)",
         lambda: am.WhisperAttention(C, H, CTX),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q and k each scaled by head_dim^-0.25 before their product; a -inf causal buffer sliced and added; "
         "`qk.float()` before the softmax and `.to(q.dtype)` after it; seq must be <= 64"),
    Spec("einsum_attention", "ext", "self-attention in torch.einsum on the (B, S, H, D) layout",
         lambda: am.EinsumAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "einsum(\"bqhd,bkhd->bhqk\") scaled after, masked_fill with -inf (key padding, True = padding), "
         "einsum(\"bhqk,bkhd->bqhd\")"),
    Spec("einsum_cross_attention", "ext", "cross-attention in torch.einsum on the (B, H, S, D) layout",
         lambda: am.EinsumAttentionBHQD(C, H),
         [("x", ("batch", "seq", C), randn), ("enc", ("batch", "enc_seq", C), randn)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5, enc_seq=9), dict(batch=3, seq=11, enc_seq=4), dict(batch=1, seq=1, enc_seq=1)],
         "einsum(\"bhqd,bhkd->bhqk\") / sqrt(d), einsum(\"bhqk,bhkd->bhqd\"), no mask"),
    Spec("einsum_swapped_attention", "ext", "self-attention in torch.einsum with each product's operands in the other order",
         lambda: am.EinsumAttentionSwapped(C, H),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), pad_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "einsum(\"bhkd,bhqd->bhqk\", k, q) / sqrt(d) (K first), masked_fill with -inf (key padding, True = padding), "
         "einsum(\"bhkd,bhqk->bhqd\", v, w) (the weights second)"),
    Spec("dalle_stable_softmax_attention", "ext", "DALLE-pytorch's causal attention with stable_softmax (the row maximum taken off)",
         lambda: am.DallePytorchAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "einsum scores of q·scale; masked_fill(~mask) and of the causal triu with -finfo.max; t / 1024 minus "
         "amax(t, -1, keepdim) (ReduceMax, Sub), times 1024, softmax; einsum with v; mask: bool, True = keep"),
    Spec("mpt_attention", "ext", "MPT's attention (llm-foundry, attn_impl='torch'): ALiBi, then padding and causal masked_fills",
         lambda: am.MPTAttention(C, H, CTX),
         [("x", ("batch", "seq", C), randn), ("key_padding_mask", ("batch", "seq"), keep_mask_bool)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q·kᵀ·scale, the ALiBi buffer [1, H, 1, 64] sliced to the keys and added, masked_fill(~key_padding_mask) "
         "and masked_fill(~tril(ones)) with finfo.min (a float16 tril cast to bool), softmax; key_padding_mask: bool, "
         "True = keep; seq must be <= 64"),
    Spec("opt_attention", "ext", "transformers' OPTAttention with OPTDecoder's mask: torch.max(scores + mask, finfo.min)",
         lambda: am.OPTAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), left_keep_mask_int)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q_proj(x)·scaling, heads in the batch; the scores viewed as (B, H, T, T) plus the finfo.min causal and "
         "padding masks, then max with finfo.min (doubly hidden scores -inf -> finfo.min), viewed back, softmax; "
         "attention_mask: int64, 1 = keep, LEFT padding (rows that see no key: uniform weights)"),
    Spec("gemma2_softcap_attention", "ext", "Gemma 2's attention (transformers' eager Gemma2Attention): scores soft-capped, causal",
         lambda: am.Gemma2SoftcapAttention(C, H, softcap=0.5),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q·kᵀ·scaling, then / softcap, tanh, · softcap (attn_logit_softcapping; 0.5 here, where Gemma 2 has 50, so "
         "that these weights' logits reach tanh's curve), the finfo.min causal mask added, softmax in float32"),
    Spec("diffusers_spatial_attention", "ext",
         "diffusion UNet/VAE spatial self-attention (diffusers' Attention with norm_num_groups, AttnProcessor)",
         lambda: am.DiffusersSpatialAttention(C, H, C // H, 8),
         [("x", ("batch", C, "height", "width"), randn)],
         [("y", ("batch", C, "height", "width"))],
         [dict(batch=2, height=4, width=6), dict(batch=3, height=5, width=3), dict(batch=1, height=1, width=1)],
         "GroupNorm(8, 32) over (B, C, H·W) exports as Reshape -> InstanceNormalization (unit scale, zero "
         "bias) -> Reshape -> Mul -> Add; the H·W pixels are the sequence; heads folded into the batch; "
         "baddbmm(empty, q, kᵀ, beta=0, alpha=scale) exports as MatMul·scale + ConstantOfShape·0; softmax "
         "upcast to float32 (Casts); residual, / rescale_output_factor 1.0"),
    Spec("timm_vit_attention", "ext", "timm's ViT Attention (recent: qkv.unbind(0), q * scale)",
         lambda: am.TimmViTAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "qkv Linear reshaped (B, N, 3, H, D) and permuted (2, 0, 3, 1, 4); unbind exports as Split + Squeeze; "
         "q scaled before its product with kᵀ"),
    Spec("timm_vit_attention_indexed", "ext", "timm's ViT Attention (older: qkv[0], qkv[1], qkv[2], scores * scale)",
         lambda: am.TimmViTAttention(C, H, indexed=True),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q, k, v are Gathers of one index on axis 0 of the permuted qkv; the scores are scaled after the product"),
    Spec("espnet_relpos_attention", "ext",
         "ESPnet's LegacyRelPositionMultiHeadedAttention (Conformer self-attention)",
         lambda: am.EspnetRelPosAttention(H, C),
         [("x", ("batch", "seq", C), randn), ("pos_emb", (1, "seq", C), randn),
          ("mask", ("batch", 1, "seq"), espnet_keep_mask)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "scores (q+pos_bias_u)·kᵀ plus (q+pos_bias_v)·pᵀ (a run-time bias), / sqrt(d_k); mask: bool (B, 1, T), "
         "True = valid, masked_fill(finfo.min) before the softmax and masked_fill(0) of the weights after it; "
         "data sets with batch >= 2 have a fully padded first row (its output is linear_out's bias)"),
    Spec("falcon_mqa_attention", "ext", "Falcon-style multi-query attention (one K/V head, broadcast)",
         lambda: am.FalconMultiQueryAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "fused projection to H query heads + one K and one V head; K and V taken with index lists "
         "(Gather of [-2] and [-1], keeping the head axis) and broadcast over the heads by the MatMuls; "
         "causal mask by Trilu, masked_fill(-inf)"),
    Spec("mistral_sliding_window_attention", "ext",
         "Mistral-style attention with a sliding window of 4 keys (GQA 4/2 heads, finfo.min mask)",
         lambda: am.MistralSlidingWindowAttention(window=4),
         [("x", ("batch", "seq", 64), randn)],
         [("y", ("batch", "seq", 64))],
         _std_sets(),
         "as transformers' MistralAttention (eager, 4.36) without padding: the causal finfo.min mask with "
         "finfo.min also below the window (1 - triu(ones, 1 - W), Trilu), built from the length at run time "
         "and added to the scores; rotary embedding, repeat_kv, softmax in float32 then `.to(q.dtype)`"),
    Spec("gpt_oss_attention", "ext",
         "gpt-oss-style attention with sinks (a learned logit a head in every softmax row; GQA 4/2 heads, causal)",
         lambda: am.GptOssAttention(),
         [("x", ("batch", "seq", 64), randn)],
         [("y", ("batch", "seq", 64))],
         _std_sets(),
         "as transformers' GptOssAttention (eager, 4.55) without padding: the scores times d^-0.5 plus the causal "
         "finfo.min mask, then sinks [H] reshaped, expanded to (B, H, Sq, 1) and concatenated as a last column "
         "(Concat), the row maximum subtracted (ReduceMax, Sub), softmax over Sk + 1 and the sink column sliced "
         "off (Slice) before · V; plain rotary, repeat_kv, biases on the projections"),
    Spec("swin_window_attention", "ext",
         "Swin Transformer's WindowAttention (window 4×4, shifted-window mask)",
         lambda: am.SwinWindowAttention(C, (4, 4), H),
         [("x", ("bw", 16, C), randn), ("mask", ("nw", 16, 16), swin_shift_mask)],
         [("y", ("bw", 16, C))],
         [dict(bw=8, nw=4), dict(bw=6, nw=2), dict(bw=1, nw=1)],
         "x: the windows of bw / nw images (B_ = bw, N = 16 tokens); q·scale, relative position bias (table "
         "indexed by a buffer: an [H, N, N] constant once folded) added, then the scores viewed as "
         "(bw / nw, nw, H, N, N) plus the (nw, N, N) 0 / -100 shifted-window mask and viewed back "
         "(Reshape, Add, Reshape); mask: Swin's own for an image of nw windows (a token sees only its region)"),
    Spec("clip_text_attention", "ext",
         "transformers' CLIPAttention in CLIP's text encoder (Stable Diffusion's): causal and padding masks",
         lambda: am.ClipTextAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets() + [dict(batch=2, seq=40)],
         "BartAttention's projections and heads in the batch; two masks each added through a (B, H, T, S) "
         "view of the scores: the finfo.min causal mask (empty().fill_(min).triu_(1), folded), then "
         "_expand_mask's padding mask; the last data set's attention_mask (80 elements) is no plan constant"),
    Spec("swinv2_window_attention", "ext",
         "Swin Transformer V2's WindowAttention (cosine attention, window 4×4, shifted-window mask)",
         lambda: am.SwinV2WindowAttention(C, (4, 4), H),
         [("x", ("bw", 16, C), randn), ("mask", ("nw", 16, 16), swin_shift_mask)],
         [("y", ("bw", 16, C))],
         [dict(bw=8, nw=4), dict(bw=6, nw=2), dict(bw=1, nw=1)],
         "as swin_window_attention, but the scores are F.normalize(q) · F.normalize(k)ᵀ (ReduceL2, Clip, "
         "Expand, Div) times a per-head logit scale ([H, 1, 1]: exp of the clamped parameter, a constant "
         "once folded), and the position bias is 16·sigmoid of an MLP over a coordinate table (folded too)",
         bf16=dict(rtol=0.1, atol=0.1,
                   why="cosine attention: scores of normalized Q and K (|cos| <= 1) times a logit scale of up to "
                       "100, so bf16's 2^-9 on Q and K is up to ~0.2 on the logits")),
    Spec("head_mask_attention", "ext", "transformers' BertSelfAttention with its head_mask: the weights times it after the softmax",
         lambda: am.HeadMaskAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("head_mask", (H,), head_mask_keep)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "attention_probs * head_mask.view(1, H, 1, 1) between the Softmax and the product with V (Mul; 1.0 keeps a "
         "head, 0.0 prunes it): a factor a head on the weights, which the fusion moves onto V"),
    Spec("post_softmax_key_mask_attention", "ext", "self-attention whose padded keys are masked after the softmax (weights times a 0/1 keep mask, not renormalized)",
         lambda: am.PostSoftmaxKeyMaskAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("keep", ("batch", "seq"), keep_mask_float)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "softmax(...) * keep[:, None, None, :] between the Softmax and the product with V (Mul by a factor a key; "
         "keep: float32, 1 = keep): the fusion moves the factor onto V's rows"),
    Spec("sam_relpos_attention", "ext",
         "segment_anything's image-encoder Attention with decomposed relative positions (SAM, ViTDet)",
         lambda: am.SamRelPosAttention(C, H, (5, 7)),
         [("x", ("batch", 5, 7, C), randn)],
         [("y", ("batch", 5, 7, C))],
         [dict(batch=1), dict(batch=2), dict(batch=3)],
         "x: (B, h, w, C) patches of a 5×7 grid; q, k, v as (B·H, h·w, d); (q · scale) @ kᵀ viewed as "
         "(B·H, h, w, h, w) (Reshape) plus rel_h[..., None] and rel_w[..., None, :] (Unsqueeze, Add), each an "
         "einsum of q with a table gathered by relative row or column, viewed back (Reshape): a bias by the key "
         "grid's rows and columns, which the fused node takes as kh + kw terms a query (bias_grid)"),
    Spec("sam_vision_attention", "ext",
         "transformers' SamVisionAttention (SAM's image encoder: the decomposed relative positions summed first)",
         lambda: am.SamVisionAttention(C, H, (6, 4)),
         [("x", ("batch", 6, 4, C), randn)],
         [("y", ("batch", 6, 4, C))],
         [dict(batch=1), dict(batch=2), dict(batch=3)],
         "as sam_relpos_attention on a 6×4 grid, but rel_h[..., None] + rel_w[..., None, :] is added first "
         "(the whole (B·H, h, w, h, w) grid, Add), reshape_as the scores (Reshape) and added to them, and the "
         "softmax runs in float32 (Cast): the fused node takes the two terms as its bias by a key grid, and the "
         "sum is never made"),
    Spec("layoutlmv3_attention", "ext",
         "transformers' LayoutLMv3SelfAttention (relative position biases, CogView's PB-relax softmax)",
         lambda: am.LayoutLMv3SelfAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_int_2d),
          ("rel_pos", ("batch", H, "seq", "seq"), randn), ("rel_2d_pos", ("batch", H, "seq", "seq"), randn)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q / sqrt(d) · kᵀ plus (rel_pos + rel_2d_pos) / sqrt(d) (Add, Div, Add: a dense bias computed on every "
         "call) plus (1 - mask) · finfo.min; then the scores / 32 minus their row maximum (ReduceMax without "
         "keepdims, Unsqueeze, Sub), times 32, softmax: the row maximum drops out of the fused node; "
         "attention_mask: int64, 1 = keep"),
    Spec("mvitv2_attention", "ext",
         "timm's MViTv2 MultiScaleAttention (decomposed relative positions added by a slice assignment)",
         lambda: am.MViTv2Attention(C, H, (4, 6)),
         [("x", ("batch", 24, C), randn)],
         [("y", ("batch", 24, C))],
         [dict(batch=1), dict(batch=2), dict(batch=3)],
         "a 4×6 grid of tokens, keys and values not pooled, no class token: the scores plus a term by the key's "
         "grid row and one by its column, as sam_relpos_attention, but assigned back into the scores by "
         "attn[:, :, 0:, 0:] = ... (an Expand of the value to the slice, a ScatterND that overwrites every "
         "element): the ScatterND is its value, the Expand a no-op, and the fused node takes the bias by a key grid"),
    Spec("temperature_attention", "ext",
         "self-attention with a learned temperature per head dividing the scores (padding masked_fill -inf)",
         lambda: am.TemperatureAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q @ kᵀ divided by temperature.clamp(min=1e-2), temperature an [H, 1, 1] parameter (Clip, folded: "
         "one divisor a head, which the fusion applies to Q), then (mask == 0) masked_fill'ed with -inf "
         "(Equal, Where); mask: int64, 1 = keep"),
    Spec("bloom_attention", "ext", "BLOOM's attention (transformers' BloomAttention: ALiBi by baddbmm, heads in the batch)",
         lambda: am.BloomAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets(),
         "q, k, v in (B·H, S, D); ALiBi (B·H, 1, S) from cumsum(attention_mask) added by baddbmm "
         "(MatMul, Mul by 1/sqrt(d), Add), the scores viewed as (B, H, S, S) (Reshape), masked_fill of the "
         "causal and padded keys with finfo.min (Where), softmax, viewed back to (B·H, S, S) (Reshape) and "
         "bmm with v; attention_mask: int64, 1 = keep"),
    Spec("bert_layer", "ext", "transformers' BertLayer with BertModel's extended attention mask",
         lambda: am.HFBertLayer(C, H, 4 * C),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets() + [dict(batch=2, seq=40)],
         "BertSelfAttention (query/key/value Linears, heads split by view + permute, q·kᵀ / sqrt(d), the "
         "[B, 1, 1, S] (1 - mask) · finfo.min added, softmax, · v, heads merged), BertSelfOutput (dense, "
         "LayerNorm of the residual sum), BertIntermediate (dense, exact GELU: Erf) and BertOutput; "
         "attention_mask: int64, 1 = keep"),
    Spec("distilbert_attention", "ext", "transformers' DistilBERT MultiHeadSelfAttention (masked_fill of padded keys)",
         lambda: am.DistilBertAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         _std_sets() + [dict(batch=2, seq=40)],
         "q_lin(x) / sqrt(d); q·kᵀ; (mask == 0) viewed as (B, 1, 1, S) and expanded to the scores "
         "(Equal, Reshape, Expand), masked_fill with finfo.min (Where), softmax, · v, out_lin; "
         "mask: int64, 1 = keep"),
    Spec("bart_attention", "ext", "transformers' BartAttention (encoder self-attention, heads in the batch)",
         lambda: am.BartAttention(C, H),
         [("x", ("batch", "seq", C), randn), ("attention_mask", ("batch", "seq"), keep_mask_int_2d)],
         [("y", ("batch", "seq", C))],
         # batch·seq > 64 in the last set: an attention_mask that large is no plan
         # constant, so the _expand_mask chain runs (before its Expand, fuse_narrow.go)
         _std_sets() + [dict(batch=2, seq=40)],
         "q_proj(x) * scaling; q, k, v in (B·H, S, D); bmm, the scores viewed as (B, H, T, S) plus "
         "_expand_mask's (1 - mask) masked_fill'ed with finfo.min ([B, 1, T, S]) and viewed back (Reshape, "
         "Add, Reshape), softmax, bmm with v; attention_mask: int64, 1 = keep"),
]



def at_opset(name, opset, notes):
    """The spec of model `name` exported at an older opset, as users export it
    (torch 1.13's default opset_version is 14; older scripts pin 11-13), named
    <name>_opset<N>, with its own data sets."""
    base = next(s for s in SPECS if s.name == name)
    return base._replace(name="%s_opset%d" % (name, opset), opset=opset,
                         notes="%s at opset %d: %s" % (name, opset, notes))


# A few older-opset exports, so that conformance, ort-diff and the fusion
# tests cover those op forms (models/export_opsets.py probes them all).
SPECS += [
    at_opset("s000_multi_head", 14, "torch.onnx.export's default opset (no opset_version given)"),
    at_opset("s000_causal_or", 11, "Split/Squeeze/Unsqueeze with attribute axes and split sizes, "
             "Softmax(axis=-1) with opset 11's 2-D coercion (a last-axis softmax here)"),
    at_opset("s001_encoder_2x4", 14, "no LayerNormalization before opset 17: each LayerNorm is "
             "ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add"),
    at_opset("t5_attention", 13, "Reshape-13 (no allowzero) and the bucket Min on int64 (Min-12 on; "
             "torch exports it at opset 11 too, where Min takes floats only and ONNX Runtime refuses the file)"),
]

# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


def concrete(shape, sizes):
    return tuple(sizes[d] if isinstance(d, str) else d for d in shape)


def dyn_axes(items, dim_params=None):
    names = dim_params or {}
    out = {}
    for name, shape, *_ in items:
        ax = {i: names.get(d, d) for i, d in enumerate(shape) if isinstance(d, str)}
        if ax:
            out[name] = ax
    return out


def make_inputs(spec, sizes, seed):
    rng = np.random.default_rng(seed)
    return [gen(rng, concrete(shape, sizes)) for _, shape, gen in spec.inputs]


def build(spec):
    torch.manual_seed(0)
    m = spec.build()
    m.eval()
    return m


def run_torch(model, arrays):
    with torch.no_grad():
        y = model(*[torch.from_numpy(a) for a in arrays])
    return y.numpy()


def run_torch_outputs(model, arrays):
    """The module's outputs as a list of arrays (one or a tuple)."""
    with torch.no_grad():
        ys = model(*[torch.from_numpy(a) for a in arrays])
    if isinstance(ys, torch.Tensor):
        ys = (ys,)
    return [y.numpy() for y in ys]


def export_model(model, spec, arrays, path):
    args = tuple(torch.from_numpy(a) for a in arrays)
    with torch.no_grad():
        torch.onnx.export(
            model, args, path,
            input_names=[n for n, *_ in spec.inputs],
            output_names=[n for n, *_ in spec.outputs],
            dynamic_axes={**dyn_axes(spec.inputs, spec.dim_params), **dyn_axes(spec.outputs, spec.dim_params)},
            opset_version=spec.opset,
            do_constant_folding=True,
        )


def write_tensor(path, arr, name):
    t = numpy_helper.from_array(arr, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


# ---------------------------------------------------------------------------
# a small numpy interpreter of the ONNX ops the exports use (check only)
# ---------------------------------------------------------------------------


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _np_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


_NP_UNARY = {
    "Abs": np.abs, "Neg": np.negative, "Log": np.log, "Cos": np.cos, "Sin": np.sin, "Relu": lambda v: np.maximum(v, 0),
    "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Reciprocal": np.reciprocal, "Tanh": np.tanh, "Exp": np.exp,
}
_NP_BINARY = {"Greater": np.greater, "Less": np.less, "Min": np.minimum, "Max": np.maximum}


def _axes_of(node, x, a):
    """Squeeze/Unsqueeze/Reduce* axes: an input from opset 13 (18 for
    ReduceMean), the `axes` attribute before; None when neither is given."""
    if len(x) > 1 and x[1] is not None:
        return [int(v) for v in x[1]]
    if "axes" in a:
        return [int(v) for v in a["axes"]]
    return None


def _np_softmax_coerced(x, axis):
    """Softmax at opset <= 12: the input is coerced to 2-D [prod(dims[:axis]),
    prod(dims[axis:])] and the softmax runs over the second dimension."""
    axis %= x.ndim
    flat = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
    return _np_softmax(flat, -1).reshape(x.shape)


def run_numpy(model, feeds):
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    env = dict(feeds)
    for init in model.graph.initializer:
        env[init.name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        a = _attrs(node)
        x = [env[i] if i else None for i in node.input]
        op = node.op_type
        if op == "Constant":
            out = [numpy_helper.to_array(a["value"])]
        elif op == "Identity":
            out = [x[0]]
        elif op == "Shape":
            out = [np.array(x[0].shape, dtype=np.int64)]
        elif op == "Gather":
            out = [np.take(x[0], x[1], axis=a.get("axis", 0))]
        elif op == "MatMul":
            out = [np.matmul(x[0], x[1])]
        elif op == "Gemm":
            A = x[0].T if a.get("transA", 0) else x[0]
            B = x[1].T if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(x) > 2 and x[2] is not None:
                y = y + a.get("beta", 1.0) * x[2]
            out = [y.astype(np.float32)]
        elif op == "Add":
            out = [x[0] + x[1]]  # numpy: bool + bool is logical or, like PyTorch
        elif op == "Sub":
            out = [x[0] - x[1]]
        elif op == "Mul":
            out = [x[0] * x[1]]
        elif op == "Div":
            if np.issubdtype(x[0].dtype, np.integer):
                out = [(x[0] // x[1]).astype(x[0].dtype)]
            else:
                out = [(x[0] / x[1]).astype(x[0].dtype)]
        elif op == "Pow":
            out = [np.power(x[0], x[1]).astype(x[0].dtype)]
        elif op == "Sqrt":
            out = [np.sqrt(x[0])]
        elif op == "Or":
            out = [np.logical_or(x[0], x[1])]
        elif op == "Not":
            out = [np.logical_not(x[0])]
        elif op == "Equal":
            out = [np.equal(x[0], x[1])]
        elif op == "Where":
            out = [np.where(x[0], x[1], x[2])]
        elif op == "ScatterND":  # reduction none: updates written at the index tuples, in order
            assert a.get("reduction", b"none") in (b"none", "none"), a
            y, idx = x[0].copy(), x[1]
            flat = idx.reshape(-1, idx.shape[-1])
            upd = x[2].reshape((flat.shape[0],) + y.shape[idx.shape[-1]:])
            for t, tup in enumerate(flat):
                y[tuple(tup)] = upd[t]
            out = [y]
        elif op == "Cast":
            dt = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[a["to"]]
            with np.errstate(invalid="ignore"):  # T5 casts log(0) = -inf to int64, then discards it
                out = [x[0].astype(dt)]
        elif op == "Unsqueeze":
            y = x[0]
            axes = _axes_of(node, x, a)
            axes = sorted(v % (y.ndim + len(axes)) for v in axes)
            for ax in axes:
                y = np.expand_dims(y, ax)
            out = [y]
        elif op == "Squeeze":
            axes = _axes_of(node, x, a)
            out = [np.squeeze(x[0], axis=tuple(axes)) if axes is not None else np.squeeze(x[0])]
        elif op == "Concat":
            out = [np.concatenate(x, axis=a["axis"])]
        elif op == "Reshape":
            shape = [int(v) for v in x[1]]
            if not a.get("allowzero", 0):
                shape = [x[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
            out = [x[0].reshape(shape)]
        elif op == "Split":
            axis = a.get("axis", 0)
            if len(x) > 1 and x[1] is not None:
                parts = [int(v) for v in x[1]]
            elif "split" in a:  # opset <= 12: the sizes are an attribute
                parts = [int(v) for v in a["split"]]
            else:
                n = len(node.output)
                parts = [x[0].shape[axis] // n] * n
            out = np.split(x[0], np.cumsum(parts)[:-1], axis=axis)
        elif op == "Transpose":
            out = [np.transpose(x[0], a.get("perm"))]
        elif op == "Softmax":
            if opset <= 12:
                out = [_np_softmax_coerced(x[0], a.get("axis", 1))]
            else:
                out = [_np_softmax(x[0], a.get("axis", -1))]
        elif op == "Slice":
            data = x[0]
            starts, ends = x[1], x[2]
            axes = x[3] if len(x) > 3 and x[3] is not None else range(len(starts))
            steps = x[4] if len(x) > 4 and x[4] is not None else [1] * len(starts)
            sl = [slice(None)] * data.ndim
            for s, e, ax, st in zip(starts, ends, axes, steps):
                sl[int(ax)] = slice(int(s), int(e), int(st))
            out = [data[tuple(sl)]]
        elif op == "ConstantOfShape":
            v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
            out = [np.full(tuple(int(d) for d in x[0]), v.reshape(-1)[0], dtype=v.dtype)]
        elif op == "Expand":
            shape = np.broadcast_shapes(x[0].shape, tuple(int(d) for d in x[1]))
            out = [np.broadcast_to(x[0], shape).copy()]
        elif op == "Tile":
            out = [np.tile(x[0], tuple(int(d) for d in x[1]))]
        elif op == "Trilu":
            k = int(x[1]) if len(x) > 1 and x[1] is not None else 0
            out = [np.triu(x[0], k) if a.get("upper", 1) else np.tril(x[0], k)]
        elif op == "LayerNormalization":
            axes = tuple(range(a.get("axis", -1) % x[0].ndim, x[0].ndim))
            mu = x[0].mean(axis=axes, keepdims=True)
            var = ((x[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (x[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * x[1]
            if len(x) > 2 and x[2] is not None:
                y = y + x[2]
            out = [y.astype(x[0].dtype)]
        elif op == "InstanceNormalization":
            axes = tuple(range(2, x[0].ndim))
            mu = x[0].mean(axis=axes, keepdims=True)
            var = ((x[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            bshape = (1, -1) + (1,) * (x[0].ndim - 2)
            y = (x[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * x[1].reshape(bshape) + x[2].reshape(bshape)
            out = [y.astype(x[0].dtype)]
        elif op == "Erf":
            out = [np.vectorize(math.erf)(x[0]).astype(x[0].dtype)]
        elif op == "CumSum":
            assert not a.get("exclusive", 0) and not a.get("reverse", 0), node.name
            out = [np.cumsum(x[0], axis=int(x[1])).astype(x[0].dtype)]
        elif op == "Range":
            out = [np.arange(x[0], x[1], x[2]).astype(x[0].dtype)]
        elif op == "Pad":
            mode = a.get("mode", b"constant").decode()
            pads = [int(v) for v in x[1]]
            r = x[0].ndim
            width = list(zip(pads[:r], pads[r:]))
            if mode == "constant":
                cv = x[2] if len(x) > 2 and x[2] is not None else np.zeros((), x[0].dtype)
                out = [np.pad(x[0], width, mode="constant", constant_values=cv)]
            else:
                out = [np.pad(x[0], width, mode=mode)]
        elif op in _NP_UNARY:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = [_NP_UNARY[op](x[0]).astype(x[0].dtype)]
        elif op in _NP_BINARY:
            out = [_NP_BINARY[op](x[0], x[1])]
        elif op in ("ReduceSum", "ReduceMean", "ReduceL2", "ReduceMax"):
            # ReduceSum takes its axes as an input from opset 13, the others from opset 18
            axes = _axes_of(node, x, a)
            axes = tuple(axes) if axes is not None else None
            f = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max,
                 "ReduceL2": lambda v, **kw: np.sqrt(np.sum(np.square(v), **kw))}[op]
            out = [f(x[0], axis=axes, keepdims=bool(a.get("keepdims", 1))).astype(x[0].dtype)]
        elif op == "Clip":  # min and max are inputs from opset 11, either may be omitted
            lo = x[1] if len(x) > 1 and x[1] is not None else None
            hi = x[2] if len(x) > 2 and x[2] is not None else None
            out = [np.clip(x[0], lo, hi).astype(x[0].dtype)]
        elif op == "Einsum":
            out = [np.einsum(a["equation"].decode(), *x)]

        else:
            raise NotImplementedError("numpy check: op %s (node %s)" % (op, node.name))
        for name, v in zip(node.output, out):
            env[name] = np.asarray(v)
    return [env[o.name] for o in model.graph.output]


# ---------------------------------------------------------------------------
# graph summaries
# ---------------------------------------------------------------------------


def op_histogram(model):
    return collections.Counter(n.op_type for n in model.graph.node)


DTYPE = {v: k for k, v in onnx.TensorProto.DataType.items()}


def value_info_str(vi):
    t = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else str(d.dim_value) for d in t.shape.dim]
    return "%s: %s[%s]" % (vi.name, DTYPE[t.elem_type].lower(), ", ".join(dims))


def quirks(model):
    q = []
    types = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        types[vi.name] = vi.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
        if init.data_type == onnx.TensorProto.BOOL:
            q.append("bool initializer %s %s (%s)" % (
                init.name, list(init.dims), "raw_data" if init.raw_data else "int32_data"))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:
        inferred = model
    for vi in inferred.graph.value_info:
        types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    for n in model.graph.node:
        if n.op_type == "Add" and all(types.get(i) == onnx.TensorProto.BOOL for i in n.input):
            q.append("Add on tensor(bool) (%s)" % n.name)
    return q


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------


def summary_row(spec, om, worst, extra_quirks, path):
    hist = op_histogram(om)
    return dict(
        spec=spec,
        inputs=[value_info_str(v) for v in om.graph.input],
        outputs=[value_info_str(v) for v in om.graph.output],
        hist=hist,
        n_init=len(om.graph.initializer),
        n_const=hist.get("Constant", 0),
        quirks=quirks(om) + extra_quirks,
        opset=[(o.domain or "ai.onnx", o.version) for o in om.opset_import],
        size=os.path.getsize(path),
        err=worst,
    )


def full_check_quirks(om):
    try:
        onnx.checker.check_model(om, full_check=True)
    except onnx.shape_inference.InferenceError as e:
        # s000_causal: strict shape inference rejects the bool Add
        return ["onnx.checker full_check (strict shape inference) fails: %s"
                % str(e).strip().splitlines()[0]]
    return []


def write_bf16_tolerance(d, tol, model, arrays, ys):
    """Writes d/bf16_tolerance.json: the model's bf16 tolerance and why, with
    the largest error of PyTorch's own bf16 (CPU autocast) against its fp32
    outputs ys on the same inputs."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        yb = model(*[torch.from_numpy(a) for a in arrays])
    yb = yb if isinstance(yb, (tuple, list)) else [yb]
    err = max(float(np.max(np.abs(b.float().numpy() - y))) for b, y in zip(yb, ys))
    doc = dict(tol, torch_bf16_autocast_max_abs=float("%.3g" % err))
    with open(os.path.join(d, "bf16_tolerance.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def export_one(spec, outdir, fresh, failures):
    """Exports one spec into outdir/<name> (when fresh; otherwise checks the
    files on disk), checks every data set with the numpy interpreter,
    appends what does not match to failures and returns the README row."""
    d = os.path.join(outdir, spec.name)
    path = os.path.join(d, "model.onnx")
    if fresh:
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        model = build(spec)
        export_inputs = make_inputs(spec, spec.datasets[0], seed=1000)
        export_model(model, spec, export_inputs, path)

    onnx.checker.check_model(path)
    om = onnx.load(path)
    extra_quirks = full_check_quirks(om)

    worst = 0.0
    for i, sizes in enumerate(spec.datasets):
        sd = os.path.join(d, "test_data_set_%d" % i)
        if fresh:
            arrays = make_inputs(spec, sizes, seed=100 * (i + 1) + len(spec.name))
            ys = run_torch_outputs(model, arrays)
            assert len(ys) == len(spec.outputs), (spec.name, "outputs")
            for y in ys:
                assert np.isfinite(y).all(), (spec.name, i, "non-finite PyTorch output")
            os.makedirs(sd)
            for k, ((name, *_), arr) in enumerate(zip(spec.inputs, arrays)):
                write_tensor(os.path.join(sd, "input_%d.pb" % k), arr, name)
            for k, ((name, *_), y) in enumerate(zip(spec.outputs, ys)):
                write_tensor(os.path.join(sd, "output_%d.pb" % k), y, name)
            if i == 0 and spec.bf16:
                write_bf16_tolerance(d, spec.bf16, model, arrays, ys)
        else:
            ys = [read_tensor(os.path.join(sd, "output_%d.pb" % k)) for k in range(len(spec.outputs))]

        # reload what was written and check the graph against it
        feeds = {}
        for k, (name, *_) in enumerate(spec.inputs):
            t = onnx.TensorProto()
            with open(os.path.join(sd, "input_%d.pb" % k), "rb") as f:
                t.ParseFromString(f.read())
            assert t.name == name
            feeds[name] = numpy_helper.to_array(t)
        for k, (got, y) in enumerate(zip(run_numpy(om, feeds), ys)):
            if got.shape != y.shape:
                failures.append("%s set %d output %d: shape %s != %s" % (spec.name, i, k, got.shape, y.shape))
                continue
            err = float(np.max(np.abs(got - y))) if y.size else 0.0
            worst = max(worst, err)
            if not err <= 1e-4:
                failures.append("%s set %d output %d: max abs err %g" % (spec.name, i, k, err))

    hist = op_histogram(om)
    row = summary_row(spec, om, worst, extra_quirks, path)
    print("%-30s opset %s  err %.2e  %s" % (spec.name, row["opset"], worst, dict(sorted(hist.items()))))
    for line in row["inputs"]:
        print("    in  " + line)
    for line in row["outputs"]:
        print("    out " + line)
    for line in row["quirks"]:
        print("    quirk: " + line)
    return row


# Attention that attnrun runs node by node, for the tests of the reason
# `attnrun inspect` gives (runtime/graph/fuse_missed_test.go): exported with
# --unfused into runtime/graph/testdata/unfused, outside models/, whose
# attention is all fused (issue 13).
UNFUSED_SPECS = [
    Spec("talking_heads_attention", "ext", "x-transformers' talking-heads attention: the heads' scores mixed by an einsum before the softmax",
         lambda: am.TalkingHeadsAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5), dict(batch=1, seq=9)],
         "einsum(\"b h i j, h k -> b k i j\") across the heads in the scores: not fused"),
    Spec("post_softmax_query_mask_attention", "ext", "self-attention whose padded queries' weights are zeroed after the softmax (weights times a 0/1 keep mask a query)",
         lambda: am.PostSoftmaxKeyMaskAttention(C, H, query=True),
         [("x", ("batch", "seq", C), randn), ("keep", ("batch", "seq"), keep_mask_float)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5), dict(batch=1, seq=9)],
         "softmax(...) * keep[:, None, :, None] between the Softmax and the product with V (Mul by a factor a query): not fused"),
    Spec("float64_softmax_attention", "ext", "self-attention with its softmax in float64",
         lambda: am.Float64SoftmaxAttention(C, H),
         [("x", ("batch", "seq", C), randn)],
         [("y", ("batch", "seq", C))],
         [dict(batch=2, seq=5), dict(batch=1, seq=9)],
         "Cast to float64 before the softmax and back after it: not fused"),
]


def export_unfused(outdir):
    """Exports UNFUSED_SPECS into outdir, each checked as export_all checks
    the bundled models."""
    failures = []
    for spec in UNFUSED_SPECS:
        export_one(spec, outdir, True, failures)
    if failures:
        sys.exit("FAILURES:\n  " + "\n  ".join(failures))


def export_all(outdir, readme, only=None):
    """Exports every spec, or only those named in `only`: the others' files
    are checked (and summarized in the README) as they are on disk."""
    unknown = set(only or ()) - {spec.name for spec in SPECS}
    if unknown:
        sys.exit("export.py: no model named %s" % ", ".join(sorted(unknown)))
    rows = []
    failures = []
    for spec in SPECS:
        fresh = only is None or spec.name in only
        rows.append(export_one(spec, outdir, fresh, failures))

    if readme:
        write_readme(os.path.join(outdir, "README.md"), rows)
    if failures:
        print("\nFAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("\n%d models exported and checked" % (len(only) if only else len(rows)))


# models/export_opset23.py writes these beside the exports (make models runs both).
OPSET23_SECTION = """
## Opset-23 models (models/export_opset23.py)

Debian's torch 1.13 exports opsets up to 17, so these graphs are written with onnx.helper at
opset 23 (IR 11) on PyTorch weights, with PyTorch's outputs as reference data, and checked by
the script's numpy interpreter of the ONNX ops they use (see its docstring):

- `s000_multi_head_attention_op`: `s000_multi_head` with its attention as one `Attention` node
  (3-D, 4 heads) on the same weights and data sets: MatMul+Add -> Split -> Attention -> MatMul+Add.
- `llama_block_gqa`: a LLaMA-style decoder block computed by PyTorch: RMSNormalization, q/k/v
  projections, RotaryEmbedding by `position_ids`, grouped-query `Attention` (4 query heads on 2
  KV heads) causal over a KV cache (`past_key`/`past_value` in, `present_key`/`present_value`
  out), output projection and residual, RMSNormalization, SwiGLU MLP (Sigmoid, Mul) and residual.
  Data sets: a prefill of 7 after 5 cached positions, one decode step after 12, and a prefill of
  4 with an empty cache."""


def write_readme(path, rows):
    L = []
    L.append("# Reference attention models\n")
    L.append("ONNX exports of the attention modules in the seed documents "
             "(`/work/shared/seeds/`), with PyTorch reference outputs. "
             "Generated by `models/export.py` (`make models`); do not edit by hand.\n")
    L.append("- Source modules: `models/attention_modules.py` (forward() as in the seeds; "
             "typos fixed, debug prints dropped).")
    L.append("- Exporter: torch %s, `torch.onnx.export(opset_version=%d, do_constant_folding=True)`, "
             "onnx %s; fp32; `torch.manual_seed(0)` before building each module; eval mode "
             "(dropout is Identity and is removed from the graph)." % (torch.__version__, OPSET, onnx.__version__))
    L.append("- Layout: `<name>/model.onnx`, `<name>/test_data_set_N/input_K.pb` and `output_0.pb` "
             "(serialized TensorProto named after the graph input/output), as in ONNX's backend tests. "
             "Data set 0 uses the export shapes; sets 1 and 2 use other batch and sequence sizes "
             "(set 2 mostly batch 1, length 1).")
    L.append("- Dynamic axes appear as `dim_param` names: `batch`, `seq`, `enc_seq`, `seq_q`, `seq_kv`; "
             "`s001_cross_attention_shared_dim` names two lengths of independent sizes `S`.")
    L.append("- Masks: `bool` masks are True = masked; `int64` masks (seed 002) are 0 = masked. "
             "Test masks are right-padding style (or column 0 kept), so no softmax row is fully masked "
             "and the outputs are NaN-free; but `llama_padded_attention`'s attention_mask is LEFT padding "
             "(1 = keep), whose fully masked rows see finfo.min on every key (uniform softmax, finite), and "
             "`espnet_relpos_attention`'s mask is True = valid (ESPnet's), with a fully padded first batch "
             "row whose weights ESPnet zeroes after the softmax.")
    L.append("- Checked at export time: `onnx.checker.check_model(full_check=True)`, and every data set "
             "re-run through a numpy interpreter of the graph (max abs error vs PyTorch in the table).")
    L.append("- Seed `000*`/`004*`: variants not in the seed text (see notes).")
    L.append("- Seed `torch`: PyTorch's own `nn.MultiheadAttention` (not from a seed) with `add_bias_kv` or "
             "`add_zero_attn`, which take its slow path: the keys and values get one more row and the "
             "key padding mask one more (kept) column, through `F.pad` (ONNX `Pad`). Exported with "
             "`--only torch_mha_bias_kv,torch_mha_zero_attn`, leaving the other models' files as they were.")
    L.append("- Seed `torch` also: `nn.MultiheadAttention` returning its weights (`need_weights=True`), with a "
             "float `attn_mask`, on unbatched inputs, and `nn.TransformerEncoderLayer` / `DecoderLayer`; seed "
             "`ext`: re-implementations of T5-, LLaMA- (opset 17: no fused ops), GPT-2- and Whisper-style "
             "attention and two `torch.einsum` spellings, written as their code bases write them (issue 13: "
             "attention fusion on the patterns real exports contain), and diffusers' spatial self-attention "
             "block of diffusion UNets/VAEs (GroupNorm over the channels, which torch 1.13 exports as "
             "InstanceNormalization; the pixels as the sequence), Swin Transformer's window attention and "
             "BLOOM's ALiBi attention (Reshapes that regroup the batch dims inside the scores chain). Exported with `--only` as well; "
             "`output_K.pb` holds graph output K where a model has several.")
    L.append("- Seed `ext` also: timm's ViT attention in its recent (unbind) and older (qkv[0], qkv[1], "
             "qkv[2]) forms, ESPnet's Conformer relative-position self-attention (masked_fill before the "
             "softmax and of the weights after it) and Falcon-style multi-query attention (index lists, K/V "
             "broadcast over the heads), transformers' BartAttention (the BART family's, heads folded "
             "into the batch around the mask's view), Mistral-style attention with a sliding window "
             "(its finfo.min mask built from the length: causal, and hiding the keys before the window), "
             "and LLaMA-style attention with transformers 4.44's mask (the padding written in by a "
             "slice assignment, which exports as a ScatterND).")
    L.append("- Models named `*_opsetN`: a model above exported at opset N (11, 13 or 14, which is "
             "torch.onnx.export's default when no opset_version is given) with its own data sets, for the "
             "older op forms users' exports carry: Split/Squeeze/Unsqueeze with attribute axes and Softmax's "
             "2-D coercion (opset <= 12), no LayerNormalization (opset < 17). `models/export_opsets.py DIR` "
             "exports every model at opsets 11, 13, 14 and 16 into a scratch directory.\n")
    L.append("| name | seed | module | inputs | output | ops | init | max err | notes |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        s = r["spec"]
        ops = ", ".join("%s×%d" % (k, v) for k, v in sorted(r["hist"].items()))
        L.append("| `%s` | %s | %s | %s | %s | %s | %d | %.1e | %s |" % (
            s.name, s.seed, s.module.replace("|", "\\|"),
            "<br>".join("`%s`" % i for i in r["inputs"]),
            "<br>".join("`%s`" % o for o in r["outputs"]),
            ops, r["n_init"], r["err"], s.notes.replace("|", "\\|")))
    allops = collections.Counter()
    for r in rows:
        allops.update(r["hist"].keys())
    L.append("\n## Op types (number of models using each)\n")
    L.append(", ".join("%s (%d)" % (k, v) for k, v in sorted(allops.items())))
    L.append("\n## Export quirks\n")
    for r in rows:
        for q in r["quirks"]:
            L.append("- `%s`: %s" % (r["spec"].name, q))
    older = [r for r in rows if r["spec"].opset != OPSET]
    L.append("- Opset import: %s for every model but the %s, exported at the opset their names end in "
             "(`at_opset` in export.py)." % (", ".join("%s %d" % o for o in rows[0]["opset"]),
                                              ", ".join("`%s`" % r["spec"].name for r in older)))
    L.append("- `nn.Linear` on 3-D input exports as `MatMul` with a pre-transposed weight initializer "
             "followed by `Add` of the bias (no `Gemm`); without bias it is a bare `MatMul`. "
             "`nn.MultiheadAttention` applies its output projection to a 2-D view: `Gemm` (transB=1).")
    L.append("- Shapes read in forward() (`B, S, C = x.shape`) become `Shape` + `Gather` (+ `Unsqueeze`, "
             "`Concat` to rebuild Reshape targets); Python-constant scales become `Constant` scalars, "
             "so `Constant` nodes carry the scalars and shape pieces, while weights and the causal "
             "buffer are initializers.")
    L.append("- Shape arithmetic is done on int64 scalars: `C//nh` is an int64 `Div` (positive operands, so "
             "truncation equals floor), followed by `Cast(to=INT64)` pairs; `b*h` is an int64 `Mul`. "
             "`k ** (1/2)` and seed 003's `torch.tensor(k.size(1)**0.5)` are computed at run time "
             "(`Cast` to float + `Pow`).")
    L.append("- Many `Constant` nodes are rank-0 (scalar) tensors: Gather indices, the 1/sqrt(d) divisor, "
             "the -inf / -1e9 / -1e20 fill values.")
    L.append("- Opset-13+ forms: `Split` takes the split sizes as its second input, `Squeeze`/`Unsqueeze` "
             "take axes as an input, `Softmax` has a single `axis` (-1, or 1 for the 2-D seed 003 models), "
             "`Reshape` carries `allowzero=0`.")
    L.append("- `Linear` biases are added as `Add(bias, MatMul_out)` (bias first). Weight initializers are "
             "named `onnx::MatMul_NN` (already transposed to (in, out)); biases keep their PyTorch names.")
    L.append("- `masked_fill(mask, v)` exports as `Where(mask, v, scores)`; with an int mask it is "
             "`Equal(mask, 0)` first. In `s000_causal` the bool `Add` result is `Cast` to bool before `Where`.")
    L.append("- Dropout modules are present in the PyTorch modules but absent from the graphs (eval mode).")
    L.append(OPSET23_SECTION)
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


class SoftmaxRecorder(TorchFunctionMode):
    """Records the input (the scaled, masked scores) and the output (the
    attention weights) of every softmax PyTorch computes, in call order."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") == "softmax":
            self.calls.append((args[0].detach().numpy().copy(), out.detach().numpy().copy()))
        return out


def export_intermediates(outdir, only=None):
    """Write PyTorch's attention intermediates for data set 0 of each model
    beside its test data: test_data_set_0/attention_scores_K.npy (the
    softmax input: QKᵀ·scale with the mask applied) and
    attention_weights_K.npy (the softmax output), K counting softmax calls
    in forward order (= the Softmax nodes in graph order); for PyTorch's
    nn.MultiheadAttention, whose softmax the recorder cannot see, only the
    weights it returns (need_weights, per head). The inputs and
    the output are re-made and checked against the committed .pb files, so
    the committed models and test data are left untouched."""
    for spec in SPECS:
        if only and spec.name not in only:
            continue
        sd = os.path.join(outdir, spec.name, "test_data_set_0")
        model = build(spec)
        arrays = make_inputs(spec, spec.datasets[0], seed=100 + len(spec.name))
        for k, arr in enumerate(arrays):
            got = read_tensor(os.path.join(sd, "input_%d.pb" % k))
            assert np.array_equal(got, arr), (spec.name, "input %d differs from the committed data set" % k)
        rec = SoftmaxRecorder()
        with torch.no_grad(), rec:
            y = model(*[torch.from_numpy(a) for a in arrays])
        if isinstance(y, tuple):
            y = y[0]  # the graph's output 0 (output_0.pb)
        want = read_tensor(os.path.join(sd, "output_0.pb"))
        assert np.array_equal(y.numpy(), want), (spec.name, "output differs from the committed data set")
        for f in os.listdir(sd):
            if f.startswith("attention_") and f.endswith(".npy"):
                os.remove(os.path.join(sd, f))
        if isinstance(model, am.TorchMultiheadAttention):
            # F.multi_head_attention_forward is one torch function to the
            # recorder, its softmax inside unseen: take the weights it
            # returns per head instead (there are no scores to save).
            with torch.no_grad():
                x, kpm = [torch.from_numpy(a) for a in arrays]
                _, w = model.mha(x, x, x, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
            # PyTorch's softmax runs on (B·H, Sq, Sk), the heads folded
            # into the batch, as the exported graph's does.
            rec.calls = [(None, w.numpy().reshape(-1, *w.shape[2:]))]
        elif isinstance(model, (am.TorchMHAWeights, am.TorchMHAUnbatched)):
            # Likewise, with the attention mask, or for unbatched queries
            # attending to a memory (weights [H, T, S]).
            with torch.no_grad():
                t = [torch.from_numpy(a) for a in arrays]
                if isinstance(model, am.TorchMHAWeights):
                    q, kv, kw = t[0], t[0], dict(key_padding_mask=t[1], attn_mask=t[2])
                else:
                    q, kv, kw = t[0], t[1], dict(key_padding_mask=t[2])
                _, w = model.mha(q, kv, kv, need_weights=True, average_attn_weights=False, **kw)
            rec.calls = [(None, w.numpy().reshape(-1, *w.shape[-2:]))]
        for k, (scores, weights) in enumerate(rec.calls):
            if scores is not None:
                # the weights are softmax(scores) along the last axis
                err = float(np.nanmax(np.abs(_np_softmax(scores, -1) - weights))) if weights.size else 0.0
                assert err < 1e-5, (spec.name, k, err)
                np.save(os.path.join(sd, "attention_scores_%d.npy" % k), scores)
            np.save(os.path.join(sd, "attention_weights_%d.npy" % k), weights)
        print("%-30s %d softmax call(s): %s" % (spec.name, len(rec.calls), ", ".join(
            "%s" % (list(w.shape),) for _, w in rec.calls)))


def export_checked(m, path, names, args, axes, feeds, outputs=("y",)):
    """Exports module m at args to path (graph inputs names, outputs
    outputs, dynamic_axes axes, opset OPSET), checks it with onnx.checker,
    and runs it on feeds (numpy arrays in names' order) with the numpy
    interpreter against PyTorch: returns the loaded model and the max abs
    error over the outputs."""
    with torch.no_grad():
        torch.onnx.export(m, args, path, input_names=names, output_names=list(outputs),
                          dynamic_axes=axes, opset_version=OPSET, do_constant_folding=True)
    onnx.checker.check_model(path)
    om = onnx.load(path)
    want = run_torch_outputs(m, feeds)
    got = run_numpy(om, dict(zip(names, feeds)))
    return om, max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))


def export_bench(outdir):
    torch.manual_seed(0)
    items = [
        ("s000_multi_head_c768", am.S000MultiHeadAttention(768, 12), ["x"]),
        ("s000_causal_c768", am.CausalAttention(768, 12, 4096), ["x", "mask"]),
        ("s000_causal_or_c768", am.CausalAttentionOr(768, 12, 4096), ["x", "mask"]),
    ]
    # A deep model whose weights do not stay in cache: PyTorch's own 12-layer
    # encoder at BERT-base size, sequence-first (x: [seq, batch, 768]), each
    # layer's weights drawn apart (identical copies would be deduplicated by
    # the exporter), 340 MB of initializers.
    enc12 = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0), 12,
                                        enable_nested_tensor=False)
    for p in enc12.parameters():
        torch.nn.init.normal_(p, std=0.02)
    items.append(("torch_encoder12_c768", enc12, ["x"]))
    # GPT-2's original attention at GPT-2-small size: the causal buffer
    # applied with torch.where and -1e4, then the float padding mask.
    items.append(("gpt2_attention_c768", am.GPT2Attention(768, 12, 2048), ["x", "attention_mask"]))
    # GPT-2-small's whole block around it: LayerNorms, residuals and the
    # MLP (c_fc to 3072, gelu_new, c_proj).
    items.append(("gpt2_block_c768", am.GPT2Block(768, 12, 2048), ["x", "attention_mask"]))
    for name, m, inames in items:
        m.eval()
        d = os.path.join(outdir, name)
        if os.path.exists(os.path.join(d, "model.onnx")):
            print("%-24s present" % name)
            continue
        os.makedirs(d, exist_ok=True)
        seq_first = name == "torch_encoder12_c768"
        x = torch.randn(16, 2, 768) if seq_first else torch.randn(2, 16, 768)
        args = (x,) if len(inames) == 1 else (x, torch.zeros(2, 16, dtype=torch.bool))
        if "attention_mask" in inames:
            args = (x, torch.ones(2, 16))
        axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
        if seq_first:
            axes = {"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}}
        for mname in ("mask", "attention_mask"):
            if mname in inames:
                axes[mname] = {0: "batch", 1: "seq"}
        path = os.path.join(d, "model.onnx")
        # checked at another shape with the numpy interpreter
        rng = np.random.default_rng(7)
        feeds = [randn(rng, (100, 1, 768) if seq_first else (1, 100, 768))]
        if "mask" in inames:
            feeds.append(pad_mask_bool(rng, (1, 100)))
        if "attention_mask" in inames:
            feeds.append((~pad_mask_bool(rng, (1, 100))).astype(np.float32))  # 1 = keep, 0 = padding
        om, err = export_checked(m, path, inames, args, axes, feeds)
        assert err < 1e-4, (name, err)
        print("%-24s %8.1f MiB  %s  (B=1,S=100 max err %.1e)" % (
            name, os.path.getsize(path) / 2**20,
            ", ".join(value_info_str(v) for v in om.graph.input), err))
    export_bench_patterns(outdir)


def export_bench_patterns(outdir):
    """The attention patterns of other code bases (the ext models of
    models/) at the sizes their models use, for bench-compare: BART-base's
    encoder self-attention, the Conformer's (ESPnet, d=256), Swin-T's first
    stage (7x7 windows of C=96, 64 windows), BLOOM-560m's, Falcon-style
    multi-query at C=1024, timm's ViT-B/16 (197 tokens), SwinV2-T's first
    stage (8x8 windows of C=96, cosine attention) and CLIP ViT-L/14's text
    encoder (Stable Diffusion's: C=768, 77 tokens), and Mistral-style
    sliding-window attention at C=1024 (16 query heads on 4 KV heads, a
    window of 1024 keys, as Gemma's local layers), and one layer of
    BERT-base (transformers' BertLayer, C=768, 12 heads, an MLP of 3072)
    and T5-base's encoder self-attention (C=768, 12 heads of 64, its
    learned position bias), and a LLaMA-style decoder block's prefill at
    C=1024 (grouped-query attention, rotary embedding, SwiGLU) and its decode
    step after a KV cache (and a multi-head one's), OPT-125m's attention (its masks floored at
    finfo.min), gpt-oss-style attention with sinks at C=1024 and SAM ViT-B's
    global attention on its 64×64 grid and windowed attention on 14×14 windows
    (decomposed relative positions). Each is checked
    against PyTorch at its export inputs with the numpy interpreter."""
    torch.manual_seed(0)
    rng = np.random.default_rng(11)
    s = 64  # export length; the graphs are dynamic in it
    swin = am.SwinWindowAttention(96, (7, 7), 3)
    for p in swin.parameters():
        torch.nn.init.normal_(p, std=0.02)
    items = [
        ("bart_attention_c768", am.BartAttention(768, 12),
         [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
          ("attention_mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        ("espnet_relpos_attention_c256", am.EspnetRelPosAttention(4, 256),
         [("x", randn(rng, (1, s, 256)), {0: "batch", 1: "seq"}), ("pos_emb", randn(rng, (1, s, 256)), {1: "seq"}),
          ("mask", np.ones((1, 1, s), bool), {0: "batch", 2: "seq"})]),
        ("swin_window_attention_c96", swin,
         [("x", randn(rng, (4, 49, 96)), {0: "bw"}), ("mask", swin_shift_mask(rng, (4, 49, 49)), {0: "nw"})]),
        ("bloom_attention_c1024", am.BloomAttention(1024, 16),
         [("x", randn(rng, (1, s, 1024)), {0: "batch", 1: "seq"}),
          ("attention_mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        ("falcon_mqa_attention_c1024", am.FalconMultiQueryAttention(1024, 16),
         [("x", randn(rng, (1, s, 1024)), {0: "batch", 1: "seq"})]),
        ("timm_vit_attention_c768", am.TimmViTAttention(768, 12, indexed=True),
         [("x", randn(rng, (1, 197, 768)), {0: "batch"})]),
        ("swinv2_window_attention_c96", am.SwinV2WindowAttention(96, (8, 8), 3),
         [("x", randn(rng, (4, 64, 96)), {0: "bw"}), ("mask", swin_shift_mask(rng, (4, 64, 64)), {0: "nw"})]),
        ("clip_text_attention_c768", am.ClipTextAttention(768, 12),
         [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
          ("attention_mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        ("mistral_sliding_window_c1024", am.MistralSlidingWindowAttention(1024, 16, 4, window=1024),
         [("x", randn(rng, (1, s, 1024)), {0: "batch", 1: "seq"})]),
        ("bert_layer_c768", am.HFBertLayer(768, 12, 3072),
         [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
          ("attention_mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        ("t5_attention_c768", am.T5Attention(768, 12, 64),
         [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
          ("mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        # T5-base's encoder: 12 T5Blocks sharing the first one's position bias.
        ("t5_encoder12_c768", am.T5EncoderStack(768, 12, 64, 3072, 12),
         [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
          ("mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]),
        # A LLaMA-style decoder block's prefill at C=1024 (16 query heads on
        # 4 KV heads of 64, a SwiGLU MLP of 2816): RMSNorms, rotary
        # embedding, grouped-query causal attention, residuals.
        ("llama_block_c1024", am.LlamaBlockPrefill(1024, 16, 4, 2816),
         [("x", randn(rng, (1, s, 1024)), {0: "batch", 1: "seq"}),
          ("position_ids", np.arange(s, dtype=np.int64)[None], {0: "batch", 1: "seq"})]),
    ]
    # Weights of a trained model's spread (made last: the modules above keep
    # the weights the seed gave them before this one was added).
    for p in items[-1][1].parameters():
        torch.nn.init.normal_(p, std=0.02)
    # OPT-125m's attention (C=768, 12 heads): the causal and padding masks
    # added through the (B, H) view, floored at finfo.min (made after the
    # ones above, which keep their weights).
    items.append(("opt_attention_c768", am.OPTAttention(768, 12),
                  [("x", randn(rng, (1, s, 768)), {0: "batch", 1: "seq"}),
                   ("attention_mask", np.ones((1, s), np.int64), {0: "batch", 1: "seq"})]))
    # The LLaMA-style block's decode step: one token after a KV cache
    # (past_key/past_value, 4 KV heads of 64), returning the present cache
    # as transformers' generate() feeds it back (weights of a trained
    # model's spread, drawn after the ones above).
    decode = am.LlamaAttentionBlock(1024, 16, 4, 2816)
    for p in decode.parameters():
        torch.nn.init.normal_(p, std=0.02)
    past = 7
    items.append(("llama_decode_c1024", decode,
                  [("x", randn(rng, (1, 1, 1024)), {0: "batch", 1: "seq"}),
                   ("position_ids", np.full((1, 1), past, np.int64), {0: "batch", 1: "seq"}),
                   ("past_key", randn(rng, (1, 4, past, 64)), {0: "batch", 2: "past"}),
                   ("past_value", randn(rng, (1, 4, past, 64)), {0: "batch", 2: "past"})]))
    # The same block with as many KV heads as query heads (multi-head
    # attention, as LLaMA-1 and LLaMA-2-7B have): a KV cache per head.
    decode_mha = am.LlamaAttentionBlock(1024, 16, 16, 2816)
    for p in decode_mha.parameters():
        torch.nn.init.normal_(p, std=0.02)
    items.append(("llama_mha_decode_c1024", decode_mha,
                  [("x", randn(rng, (1, 1, 1024)), {0: "batch", 1: "seq"}),
                   ("position_ids", np.full((1, 1), past, np.int64), {0: "batch", 1: "seq"}),
                   ("past_key", randn(rng, (1, 16, past, 64)), {0: "batch", 2: "past"}),
                   ("past_value", randn(rng, (1, 16, past, 64)), {0: "batch", 2: "past"})]))
    # gpt-oss-style attention at C=1024 (16 query heads on 4 KV heads of 64,
    # biases, causal, a learned sink logit a head), weights of a trained
    # model's spread, drawn after the ones above.
    gpt_oss = am.GptOssAttention(1024, 16, 4)
    for p in gpt_oss.parameters():
        torch.nn.init.normal_(p, std=0.02)
    with torch.no_grad():
        gpt_oss.sinks.copy_(torch.linspace(-2.0, 3.0, 16))
    items.append(("gpt_oss_attention_c1024", gpt_oss, [("x", randn(rng, (1, s, 1024)), {0: "batch", 1: "seq"})]))
    # SAM ViT-B's global attention (C=768, 12 heads of 64) on its 64×64
    # grid of patches (a 1024-pixel image): its relative-position tables
    # fix the grid, so the export is at that size.
    sam = am.SamRelPosAttention(768, 12, (64, 64))
    for p in sam.parameters():
        torch.nn.init.normal_(p, std=0.02)
    with torch.no_grad():
        sam.rel_pos_h.mul_(10)
        sam.rel_pos_w.mul_(10)
    items.append(("sam_global_attention_c768", sam, [("x", randn(rng, (1, 64, 64, 768)), {0: "batch"})]))
    # Its windowed attention (most of the encoder's blocks): 14×14 windows,
    # the windows in the batch (25 for the padded 64×64 grid).
    sam_win = am.SamRelPosAttention(768, 12, (14, 14))
    for p in sam_win.parameters():
        torch.nn.init.normal_(p, std=0.02)
    with torch.no_grad():
        sam_win.rel_pos_h.mul_(10)
        sam_win.rel_pos_w.mul_(10)
    items.append(("sam_window_attention_c768", sam_win, [("x", randn(rng, (4, 14, 14, 768)), {0: "windows"})]))
    present = {0: "batch", 2: "total"}
    for name, m, ins in items:
        m.eval()
        d = os.path.join(outdir, name)
        path = os.path.join(d, "model.onnx")
        if os.path.exists(path):
            print("%-28s present" % name)
            continue
        os.makedirs(d, exist_ok=True)
        arrays = [a for _, a, _ in ins]
        axes = {n: ax for n, _, ax in ins}
        axes["y"] = dict(ins[0][2])
        outputs = ["y"]
        if "past_key" in axes:
            outputs += ["present_key", "present_value"]
            axes["present_key"], axes["present_value"] = present, present
        om, err = export_checked(m, path, [n for n, _, _ in ins], tuple(torch.from_numpy(a) for a in arrays), axes, arrays,
                                 outputs)
        assert err < 1e-4, (name, err)
        print("%-28s %8.1f MiB  %s  (max err %.1e)" % (
            name, os.path.getsize(path) / 2**20, ", ".join(value_info_str(v) for v in om.graph.input), err))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="output directory (default: models/)")
    ap.add_argument("--bench", metavar="DIR", help="export the large seed-000 benchmark models into DIR instead")
    ap.add_argument("--unfused", metavar="DIR",
                    help="export the attention attnrun does not fuse (UNFUSED_SPECS) into DIR instead "
                         "(runtime/graph/testdata/unfused)")
    ap.add_argument("--only", metavar="NAMES", action="append",
                    help="export only these models (comma-separated, repeatable); the others are checked as they are on disk")
    ap.add_argument("--intermediates", action="store_true",
                    help="only write PyTorch's attention scores and weights for data set 0 of the models "
                         "(all, or --only) beside their committed test data")
    args = ap.parse_args()
    if args.bench:
        export_bench(args.bench)
        return
    if args.unfused:
        export_unfused(args.unfused)
        return
    only = {n for arg in args.only for n in arg.split(",") if n} if args.only else None
    if args.intermediates:
        export_intermediates(args.out, only)
        return
    export_all(args.out, readme=True, only=only)


if __name__ == "__main__":
    main()
