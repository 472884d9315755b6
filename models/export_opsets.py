#!/usr/bin/python3
"""Export the models of models/export.py at older opsets into a scratch directory.

torch 1.13's torch.onnx.export defaults to opset 14 when a user passes no
opset_version, and older scripts pin 11, 12 or 13; models/ is exported at 17.
This probe exports every spec of export.py (or --only NAMES) at each opset of
--opsets into DIR/<name>_opset<N>/ with the same layout and PyTorch reference
data sets as models/, checked by export.py's numpy interpreter (which knows
the older op forms: Split/Squeeze/Unsqueeze/ReduceSum with attribute axes,
Softmax's 2-D coercion at opset <= 12). Nothing under models/ is written.

Usage (from the repository root):

    /usr/bin/python3 models/export_opsets.py DIR [--opsets 11,13,14,16] [--only NAMES]
    bin/attnrun conform DIR            # then conform, fused and --no-fuse

A model torch cannot export at an opset (an op with no symbolic there, e.g.
triu before 14, einsum before 12) is reported and skipped; the exit status
is 1 only when an export that torch produced disagrees with PyTorch.
"""

import argparse
import os
import sys
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="scratch output directory")
    ap.add_argument("--opsets", default="11,13,14,16", help="comma-separated opset versions")
    ap.add_argument("--only", help="comma-separated model names of export.py (default: all)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    specs = [s for s in export.SPECS if s.opset == export.OPSET and (only is None or s.name in only)]
    if only and len(specs) != len(only):
        sys.exit("export_opsets.py: unknown model in %s" % sorted(only - {s.name for s in specs}))
    os.makedirs(args.dir, exist_ok=True)
    failures, skipped, done = [], [], []
    for opset in (int(v) for v in args.opsets.split(",")):
        for spec in specs:
            old = spec._replace(name="%s_opset%d" % (spec.name, opset), opset=opset)
            try:
                export.export_one(old, args.dir, True, failures)
                done.append(old.name)
            except Exception as e:  # torch cannot export it at this opset
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                skipped.append("%s: %s: %s" % (old.name, type(e).__name__, msg[:200]))
                if os.environ.get("EXPORT_OPSETS_TRACE"):
                    traceback.print_exc()
                d = os.path.join(args.dir, old.name)
                if os.path.isdir(d):
                    export.shutil.rmtree(d)
    print("\n%d exports written to %s" % (len(done), args.dir))
    if skipped:
        print("NOT EXPORTED (%d):\n  %s" % (len(skipped), "\n  ".join(skipped)))
    if failures:
        print("FAILURES (numpy interpreter vs PyTorch):\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
