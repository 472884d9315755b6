#!/usr/bin/python3
"""Models at ONNX opset 23 (Attention, RotaryEmbedding, RMSNormalization), with reference data.

Usage (from the repository root):

    /usr/bin/python3 models/export_opset23.py              # writes models/<name>/...
    /usr/bin/python3 models/export_opset23.py --bench DIR  # DIR/s000_multi_head_c768_attention_op from
                                                           # DIR/s000_multi_head_c768 (export.py --bench DIR first)

Debian's torch 1.13 exports opsets up to 17 and its onnx 1.12 knows opsets up
to 17, so these graphs are written with onnx.helper (IR 11, opset 23, as ONNX
1.22's own node tests for these ops) and checked by a numpy interpreter of
the ops they use, written from ONNX's operator definitions (onnx.checker of
1.12 cannot check them). The reference outputs come from PyTorch:

* s000_multi_head_attention_op: seed 000's MultiHeadAttention (models/
  s000_multi_head) with its attention as one Attention node: the same
  weights, read from models/s000_multi_head/model.onnx, and the same data
  sets (copied: same inputs, PyTorch's outputs of the same module).
  x -> MatMul+Add (Wqkv) -> Split -> Attention (3-D, 4 heads) -> MatMul+Add (Wo).
* llama_block_gqa: a LLaMA-style decoder block computed by PyTorch
  (LlamaBlock below, torch.manual_seed(0)): RMSNorm, q/k/v projections,
  rotary embedding by position ids, grouped-query attention (4 query heads on
  2 KV heads) that is causal over a KV cache (past_key/past_value in,
  present_key/present_value out), output projection and residual, RMSNorm,
  SwiGLU MLP and residual. Data sets: a prefill after 5 cached positions,
  one decode step after 12, and a prefill with an empty cache.
"""

import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
OPSET, IR = 23, 11


# ---------------------------------------------------------------------------
# numpy interpreter of the graphs (ONNX semantics, float32)
# ---------------------------------------------------------------------------


def _softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _rms_norm(x, scale, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    ms = np.mean(x.astype(np.float64) ** 2, axis=axes, keepdims=True)
    return (x / np.sqrt(ms + eps) * scale).astype(np.float32)


def _rotary(x, cos, sin, pos, num_heads, interleaved, rdim):
    shape = x.shape
    if x.ndim == 4:
        x = x.transpose(0, 2, 1, 3)  # [B, S, H, D]
    else:
        x = x.reshape(shape[0], shape[1], num_heads, -1)
    d = x.shape[-1]
    rd = rdim or d
    if pos is not None:
        cos, sin = cos[pos], sin[pos]  # [B, S, rd/2]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot = x[..., :rd]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rot, x[..., rd:]], axis=-1)
    if len(shape) == 4:
        return out.transpose(0, 2, 1, 3)
    return out.reshape(shape)


def _attention(q, k, v, mask, past_k, past_v, a):
    three_d = q.ndim == 3
    if three_d:
        def heads(t, h):
            b, s, hd = t.shape
            return t.reshape(b, s, h, hd // h).transpose(0, 2, 1, 3)
        q, k, v = heads(q, a["q_num_heads"]), heads(k, a["kv_num_heads"]), heads(v, a["kv_num_heads"])
    past = 0
    if past_k is not None:
        past = past_k.shape[2]
        k, v = np.concatenate([past_k, k], axis=2), np.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
    scale = a.get("scale", 1 / np.sqrt(q.shape[-1]))
    s = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)) * scale
    sq, total = s.shape[-2:]
    if mask is not None:
        s = s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask)
    if a.get("is_causal", 0):
        i, j = np.arange(sq)[:, None], np.arange(total)[None, :]
        s = np.where(j > i + past, -np.inf, s)
    y = (_softmax(s) @ v).astype(np.float32)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], sq, -1)
    return y, present_k, present_v


def run_numpy(model, feeds):
    env = dict(feeds)
    for init in model.graph.initializer:
        env[init.name] = numpy_helper.to_array(init)
    for n in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        x = [env[i] if i else None for i in n.input]
        op = n.op_type
        if op == "MatMul":
            out = [np.matmul(x[0], x[1])]
        elif op == "Add":
            out = [x[0] + x[1]]
        elif op == "Mul":
            out = [x[0] * x[1]]
        elif op == "Sigmoid":
            out = [(1 / (1 + np.exp(-x[0]))).astype(np.float32)]
        elif op == "Split":
            out = np.split(x[0], np.cumsum(x[1])[:-1], axis=a.get("axis", 0))
        elif op == "RMSNormalization":
            out = [_rms_norm(x[0], x[1], a.get("axis", -1), a.get("epsilon", 1e-5))]
        elif op == "RotaryEmbedding":
            out = [_rotary(x[0], x[1], x[2], x[3] if len(x) > 3 else None, a.get("num_heads", 0),
                           a.get("interleaved", 0), a.get("rotary_embedding_dim", 0))]
        elif op == "Attention":
            x += [None] * (6 - len(x))
            out = _attention(x[0], x[1], x[2], x[3], x[4], x[5], a)
        else:
            raise NotImplementedError(op)
        for name, val in zip(n.output, out):
            if name:
                env[name] = val
    return [env[o.name] for o in model.graph.output]


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------


def write_tensor(path, arr, name):
    t = numpy_helper.from_array(np.ascontiguousarray(arr), name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def read_tensor(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def save_model(graph, path):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="attnrun models/export_opset23.py")
    m.ir_version = IR
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return m


def float_vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def check_sets(model, d, tol=1e-4):
    """Runs every data set of d through the numpy interpreter against its outputs."""
    worst = 0.0
    for sd in sorted(x for x in os.listdir(d) if x.startswith("test_data_set_")):
        feeds, want = {}, []
        for f in sorted(os.listdir(os.path.join(d, sd))):
            name, arr = read_tensor(os.path.join(d, sd, f))
            (feeds.__setitem__(name, arr) if f.startswith("input_") else want.append(arr))
        got = run_numpy(model, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (d, sd, g.shape, w.shape)
            err = float(np.max(np.abs(g - w))) if w.size else 0.0
            assert err <= tol, (d, sd, err)
            worst = max(worst, err)
    return worst


# ---------------------------------------------------------------------------
# s000_multi_head_attention_op: the Attention-node twin of a seed-000 export
# ---------------------------------------------------------------------------


def attention_twin(src_model, heads):
    """The graph of src_model (seed 000's MultiHeadAttention export) with the
    attention written as one Attention node, on src_model's own weights."""
    src = onnx.load(src_model)
    inits = {i.name: i for i in src.graph.initializer}
    mm = [n for n in src.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    adds = {n.input[1]: n for n in src.graph.node if n.op_type == "Add" and n.input[0] in inits}
    (wqkv, wo) = (mm[0].input[1], mm[1].input[1])
    bqkv, bo = adds[mm[0].output[0]].input[0], adds[mm[1].output[0]].input[0]
    c = numpy_helper.to_array(inits[wqkv]).shape[0]
    split = numpy_helper.from_array(np.array([c, c, c], dtype=np.int64), "qkv_split")
    nodes = [
        helper.make_node("MatMul", ["x", wqkv], ["qkv_mm"], name="/Wqkv/MatMul"),
        helper.make_node("Add", [bqkv, "qkv_mm"], ["qkv"], name="/Wqkv/Add"),
        helper.make_node("Split", ["qkv", "qkv_split"], ["q", "k", "v"], name="/Split", axis=2),
        helper.make_node("Attention", ["q", "k", "v"], ["attn"], name="/Attention",
                         q_num_heads=heads, kv_num_heads=heads),
        helper.make_node("MatMul", ["attn", wo], ["out_mm"], name="/Wo/MatMul"),
        helper.make_node("Add", [bo, "out_mm"], ["y"], name="/Wo/Add"),
    ]
    g = helper.make_graph(nodes, "s000_multi_head_attention_op",
                          [float_vi("x", ["batch", "seq", c])], [float_vi("y", ["batch", "seq", c])],
                          initializer=[inits[n] for n in (wqkv, bqkv, wo, bo)] + [split])
    return g


def export_twin(outdir):
    name, src = "s000_multi_head_attention_op", os.path.join(HERE, "s000_multi_head")
    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    m = save_model(attention_twin(os.path.join(src, "model.onnx"), heads=4), os.path.join(d, "model.onnx"))
    for sd in sorted(x for x in os.listdir(src) if x.startswith("test_data_set_")):
        shutil.copytree(os.path.join(src, sd), os.path.join(d, sd))
    return name, check_sets(m, d)


# ---------------------------------------------------------------------------
# llama_block_gqa: PyTorch reference, ONNX graph on its weights
# ---------------------------------------------------------------------------

C, HQ, HKV, D, FFN, MAXPOS, EPS = 64, 4, 2, 16, 128, 64, 1e-6


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    """LLaMA's rotary embedding on [B, H, S, D] with cos/sin [B, 1, S, D/2] (halves)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(C, EPS), RMSNorm(C, EPS)
        self.wq = nn.Linear(C, HQ * D, bias=False)
        self.wk = nn.Linear(C, HKV * D, bias=False)
        self.wv = nn.Linear(C, HKV * D, bias=False)
        self.wo = nn.Linear(HQ * D, C, bias=False)
        self.w1 = nn.Linear(C, FFN, bias=False)
        self.w3 = nn.Linear(C, FFN, bias=False)
        self.w2 = nn.Linear(FFN, C, bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        freqs = torch.outer(torch.arange(MAXPOS, dtype=torch.float32), inv)
        self.register_buffer("cos", freqs.cos())
        self.register_buffer("sin", freqs.sin())

    def forward(self, x, position_ids, past_key, past_value):
        b, s, _ = x.shape
        h = self.ln1(x)
        q = self.wq(h).view(b, s, HQ, D).transpose(1, 2)
        k = self.wk(h).view(b, s, HKV, D).transpose(1, 2)
        v = self.wv(h).view(b, s, HKV, D).transpose(1, 2)
        cos, sin = self.cos[position_ids].unsqueeze(1), self.sin[position_ids].unsqueeze(1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k, v = torch.cat([past_key, k], dim=2), torch.cat([past_value, v], dim=2)
        past, total = past_key.shape[2], k.shape[2]
        kk, vv = k.repeat_interleave(HQ // HKV, dim=1), v.repeat_interleave(HQ // HKV, dim=1)
        scores = q @ kk.transpose(-1, -2) / D ** 0.5
        i, j = torch.arange(s)[:, None], torch.arange(total)[None, :]
        scores = scores.masked_fill(j > i + past, float("-inf"))
        attn = (scores.softmax(-1) @ vv).transpose(1, 2).reshape(b, s, HQ * D)
        x = x + self.wo(attn)
        h = self.ln2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h)), k, v


def llama_graph(m):
    def w(name, t):
        return numpy_helper.from_array(t.detach().numpy().astype(np.float32), name)
    inits = [w("ln1.weight", m.ln1.weight), w("ln2.weight", m.ln2.weight),
             w("wq", m.wq.weight.T), w("wk", m.wk.weight.T), w("wv", m.wv.weight.T), w("wo", m.wo.weight.T),
             w("w1", m.w1.weight.T), w("w3", m.w3.weight.T), w("w2", m.w2.weight.T),
             w("cos_cache", m.cos), w("sin_cache", m.sin)]
    N = helper.make_node
    nodes = [
        N("RMSNormalization", ["x", "ln1.weight"], ["h1"], name="/ln1", axis=-1, epsilon=EPS),
        N("MatMul", ["h1", "wq"], ["q"], name="/wq"),
        N("MatMul", ["h1", "wk"], ["k"], name="/wk"),
        N("MatMul", ["h1", "wv"], ["v"], name="/wv"),
        N("RotaryEmbedding", ["q", "cos_cache", "sin_cache", "position_ids"], ["q_rot"], name="/rope_q", num_heads=HQ),
        N("RotaryEmbedding", ["k", "cos_cache", "sin_cache", "position_ids"], ["k_rot"], name="/rope_k", num_heads=HKV),
        N("Attention", ["q_rot", "k_rot", "v", "", "past_key", "past_value"], ["attn", "present_key", "present_value"],
          name="/self_attn", q_num_heads=HQ, kv_num_heads=HKV, is_causal=1),
        N("MatMul", ["attn", "wo"], ["o"], name="/wo"),
        N("Add", ["x", "o"], ["x1"], name="/residual1"),
        N("RMSNormalization", ["x1", "ln2.weight"], ["h2"], name="/ln2", axis=-1, epsilon=EPS),
        N("MatMul", ["h2", "w1"], ["gate"], name="/w1"),
        N("Sigmoid", ["gate"], ["gate_sig"], name="/silu/Sigmoid"),
        N("Mul", ["gate", "gate_sig"], ["gate_silu"], name="/silu/Mul"),
        N("MatMul", ["h2", "w3"], ["up"], name="/w3"),
        N("Mul", ["gate_silu", "up"], ["ffn"], name="/ffn"),
        N("MatMul", ["ffn", "w2"], ["down"], name="/w2"),
        N("Add", ["x1", "down"], ["y"], name="/residual2"),
    ]
    inputs = [float_vi("x", ["batch", "seq", C]), float_vi("position_ids", ["batch", "seq"], TensorProto.INT64),
              float_vi("past_key", ["batch", HKV, "past", D]), float_vi("past_value", ["batch", HKV, "past", D])]
    outputs = [float_vi("y", ["batch", "seq", C]), float_vi("present_key", ["batch", HKV, "total", D]),
               float_vi("present_value", ["batch", HKV, "total", D])]
    return helper.make_graph(nodes, "llama_block_gqa", inputs, outputs, initializer=inits)


def export_llama(outdir):
    name = "llama_block_gqa"
    d = os.path.join(outdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    torch.manual_seed(0)
    block = LlamaBlock().eval()
    m = save_model(llama_graph(block), os.path.join(d, "model.onnx"))
    # (batch, seq, past): prefill after a cache, one decode step, prefill from nothing
    for i, (b, s, past) in enumerate([(2, 7, 5), (1, 1, 12), (2, 4, 0)]):
        rng = np.random.default_rng(2300 + i)
        x = rng.standard_normal((b, s, C)).astype(np.float32)
        pos = np.broadcast_to(np.arange(past, past + s, dtype=np.int64), (b, s)).copy()
        pk = rng.standard_normal((b, HKV, past, D)).astype(np.float32)
        pv = rng.standard_normal((b, HKV, past, D)).astype(np.float32)
        with torch.no_grad():
            outs = block(*(torch.from_numpy(a) for a in (x, pos, pk, pv)))
        sd = os.path.join(d, "test_data_set_%d" % i)
        os.makedirs(sd)
        for k, (nm, arr) in enumerate(zip(["x", "position_ids", "past_key", "past_value"], [x, pos, pk, pv])):
            write_tensor(os.path.join(sd, "input_%d.pb" % k), arr, nm)
        for k, (nm, t) in enumerate(zip(["y", "present_key", "present_value"], outs)):
            arr = t.numpy()
            assert np.isfinite(arr).all()
            write_tensor(os.path.join(sd, "output_%d.pb" % k), arr, nm)
    return name, check_sets(m, d)


def export_bench(outdir):
    src = os.path.join(outdir, "s000_multi_head_c768", "model.onnx")
    if not os.path.exists(src):
        sys.exit("%s is missing: run models/export.py --bench %s first" % (src, outdir))
    d = os.path.join(outdir, "s000_multi_head_c768_attention_op")
    os.makedirs(d, exist_ok=True)
    m = save_model(attention_twin(src, heads=12), os.path.join(d, "model.onnx"))
    # the twin computes what the primitive export computes (numpy, B=1, S=100)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 100, 768)).astype(np.float32)
    (got,) = run_numpy(m, {"x": x})
    sys.path.insert(0, HERE)
    from export import run_numpy as run_primitive  # noqa: E402  (export.py's interpreter of opset-17 graphs)
    (want,) = run_primitive(onnx.load(src), {"x": x})
    err = float(np.max(np.abs(got - want)))
    assert err < 1e-4, err
    print("s000_multi_head_c768_attention_op: %s (B=1,S=100 max err vs the primitive export %.1e)" % (d, err))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE, help="output directory (default: models/)")
    ap.add_argument("--bench", metavar="DIR", help="write the C=768 Attention twin of DIR/s000_multi_head_c768")
    args = ap.parse_args()
    if args.bench:
        export_bench(args.bench)
        return
    for name, err in (export_twin(args.out), export_llama(args.out)):
        print("%-32s opset %d  max err vs reference outputs %.1e" % (name, OPSET, err))


if __name__ == "__main__":
    main()
