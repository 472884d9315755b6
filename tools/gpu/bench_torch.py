#!/usr/bin/env python3
"""PyTorch eager baseline for attnrun's GPU backend (seed 000 MultiHeadAttention).

Times seed 000's MultiHeadAttention (C=768, 12 heads, fp32, batch 8) on CUDA
at S = 512, 2048, 8192 in two forms:

  eager  the seed module as written: q @ k^T, / sqrt(d), softmax, @ v
         (materializes the B*H*S*S score matrix; S=8192 needs ~52 GB)
  sdpa   the same weights through F.scaled_dot_product_attention (PyTorch
         >= 2.0 picks flash / memory-efficient kernels; fp32 inputs may make
         it fall back to the math kernel - the chosen backend is printed)

For each it reports the median latency with the input already on the GPU
("device") and including the host->device copy of x and the device->host
copy of y ("host", comparable with `attnrun bench`, whose timing includes
moving tensors to and from the backend process and the GPU), and the peak
CUDA memory. TF32 is off unless --tf32 (attnrun's GPU backend also keeps it
off by default; see backends/gpu/README.md).

With --onnx DIR it also exports the model with the same weights
(torch.manual_seed(0)) to DIR/s000_multi_head_c768/model.onnx, for
`attnrun bench --backend gpu` (tools/gpu/device_check.sh does both).

Usage:
  python3 tools/gpu/bench_torch.py [--seqs 512,2048,8192] [--batch 8] [--iters 20]
                                   [--tf32] [--onnx DIR] [--json FILE]
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.dont_write_bytecode = True

import attention_modules as am  # noqa: E402  (seed 000 MultiHeadAttention)


class SDPAMultiHeadAttention(torch.nn.Module):
    """seed 000 MultiHeadAttention with F.scaled_dot_product_attention."""

    def __init__(self, ref):
        super().__init__()
        self.nh, self.Wqkv, self.Wo = ref.nh, ref.Wqkv, ref.Wo

    def forward(self, x):
        B, S, C = x.shape
        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C // self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.Wo(y.transpose(1, 2).reshape(B, S, C))


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def sdpa_backend(q):
    """Best effort: which SDPA kernel PyTorch would use for fp32 inputs like q."""
    try:
        from torch.backends.cuda import flash_sdp_enabled, mem_efficient_sdp_enabled  # noqa: F401
        params = torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, False)
        if torch.backends.cuda.can_use_flash_attention(params):
            return "flash"
        if torch.backends.cuda.can_use_efficient_attention(params):
            return "mem_efficient"
        return "math"
    except Exception:  # older PyTorch: no introspection
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqs", default="512,2048,8192")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in matmuls (default: off)")
    ap.add_argument("--onnx", metavar="DIR", help="also export the ONNX model (same weights) into DIR")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32

    torch.manual_seed(0)
    ref = am.S000MultiHeadAttention(768, 12).eval()
    if args.onnx:
        d = os.path.join(args.onnx, "s000_multi_head_c768")
        os.makedirs(d, exist_ok=True)
        with torch.no_grad():
            torch.onnx.export(ref, (torch.randn(2, 16, 768),), os.path.join(d, "model.onnx"),
                              input_names=["x"], output_names=["y"], opset_version=17,
                              dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
        print("exported", os.path.join(d, "model.onnx"))
    dev = torch.device("cuda")
    models = {"eager": ref.to(dev), "sdpa": SDPAMultiHeadAttention(ref).to(dev)}
    print("torch %s, %s, TF32 %s" % (torch.__version__, torch.cuda.get_device_name(0), "on" if args.tf32 else "off"))
    rows = []
    for s in [int(v) for v in args.seqs.split(",")]:
        x_host = torch.randn(args.batch, s, 768).pin_memory()
        x_dev = x_host.to(dev)
        with torch.no_grad():
            want = None
            for name, m in models.items():
                row = {"mode": name, "batch": args.batch, "seq": s}
                if name == "sdpa":
                    row["sdpa_kernel"] = sdpa_backend(torch.empty(args.batch, 12, s, 64, device=dev))
                try:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    y = m(x_dev)
                    if want is None:
                        want = y
                    else:
                        row["max_abs_diff_vs_eager"] = float((y - want).abs().max())
                    row["device_ms"] = timed(lambda: m(x_dev), args.iters, args.warmup)
                    row["host_ms"] = timed(lambda: m(x_host.to(dev, non_blocking=True)).cpu(), args.iters, args.warmup)
                    row["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
                    flops = 2 * args.batch * s * 768 * 768 * 4 + 4 * args.batch * s * s * 768
                    row["tflops_device"] = flops / (row["device_ms"] * 1e-3) / 1e12
                except torch.cuda.OutOfMemoryError as e:
                    row["error"] = "OOM: " + str(e).split("\n")[0]
                rows.append(row)
                print(json.dumps(row))
            del want
    print()
    print("| mode | S | device ms | host ms | TFLOP/s | peak CUDA MiB | note |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print("| %s | %d | - | - | - | - | %s |" % (r["mode"], r["seq"], r["error"][:60]))
            continue
        note = r.get("sdpa_kernel", "")
        if "max_abs_diff_vs_eager" in r:
            note += " (max |diff| vs eager %.1e)" % r["max_abs_diff_vs_eager"]
        print("| %s | %d | %.2f | %.2f | %.1f | %.0f | %s |" % (r["mode"], r["seq"], r["device_ms"], r["host_ms"],
                                                              r["tflops_device"], r["peak_cuda_mib"], note))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "tf32": args.tf32, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
