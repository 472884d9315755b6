#!/bin/sh
# Regenerates onnx.pb.go from onnx.proto (ONNX 1.12's proto, with its proto
# package renamed to attnrun.onnx so that it can be linked beside onnx-go).
# Needs protoc and protoc-gen-go (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6).
set -eu
cd "$(dirname "$0")"
PATH="$PATH:$(go env GOPATH)/bin:/root/go/bin"
protoc --go_out=. --go_opt=paths=source_relative onnx.proto
