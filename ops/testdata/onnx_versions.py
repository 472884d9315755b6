#!/usr/bin/env python3
"""Writes onnx_versions.txt: every default-domain (ai.onnx) op of an ONNX
release and the opset versions at which ONNX changed it, read from that
release's docs/Operators.md. TestRegistryFollowsONNX (ops/versions_test.go)
checks attnrun's registry against it.

    git --git-dir=<onnx mirror> show v1.22.0:docs/Operators.md > /tmp/Operators.md
    python3 ops/testdata/onnx_versions.py /tmp/Operators.md v1.22.0 > ops/testdata/onnx_versions.txt
"""
import re
import sys


def main():
    path, tag = sys.argv[1], sys.argv[2]
    text = open(path, encoding="utf-8").read()
    parts = re.split(r"\n## (\S+)", text)
    default = None
    for name, body in zip(parts[1::2], parts[2::2]):
        if name == "ai.onnx":
            default = body
    if default is None:
        sys.exit("no ai.onnx section in " + path)
    sections = re.split(r'\n### <a name="([^"]+)"></a>', default)
    print(f"# ai.onnx op versions of ONNX {tag}, from its docs/Operators.md (ops/testdata/onnx_versions.py)")
    print("# op since-versions...")
    for name, body in sorted(zip(sections[1::2], sections[2::2])):
        head = body.split("#### Attributes")[0].split("#### Inputs")[0]
        now = re.search(r"available since version (\d+)", head)
        if not now:
            continue
        older = re.findall(r'Changelog\.md#[^">]*-(\d+)">', head)
        vs = sorted({int(v) for v in older} | {int(now.group(1))})
        print(name, *vs)


main()
