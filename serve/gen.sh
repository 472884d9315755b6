#!/bin/sh
# Regenerates serve/v2pb from serve/proto/grpc_predict_v2.proto (KServe's Open
# Inference Protocol service, copied unchanged; see serve/proto/README.md).
#
# Needs protoc and the two Go plugins at the versions the committed files name:
#   apt-get install protobuf-compiler            # protoc 3.21.12 on Debian 12
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.6
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
# The .proto has no go_package option; the M flags give it one.
set -eu
cd "$(dirname "$0")"
PATH="$PATH:$(go env GOPATH)/bin"
pkg=github.com/attnrun/attnrun/serve/v2pb
protoc -I proto \
	--go_out=v2pb --go_opt=paths=source_relative --go_opt=Mgrpc_predict_v2.proto=$pkg \
	--go-grpc_out=v2pb --go-grpc_opt=paths=source_relative --go-grpc_opt=Mgrpc_predict_v2.proto=$pkg \
	proto/grpc_predict_v2.proto
