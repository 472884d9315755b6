#!/bin/sh
# Regenerates plugins/backendpb from plugins/proto/backend.proto.
# Needs protoc, protoc-gen-go (google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6)
# and protoc-gen-go-grpc (google.golang.org/grpc/cmd/protoc-gen-go-grpc).
set -eu
cd "$(dirname "$0")"
PATH="$PATH:$(go env GOPATH)/bin:/root/go/bin"
protoc -I proto \
	--go_out=backendpb --go_opt=paths=source_relative \
	--go-grpc_out=backendpb --go-grpc_opt=paths=source_relative \
	proto/backend.proto
