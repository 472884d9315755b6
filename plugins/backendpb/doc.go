// Package backendpb holds the Go bindings generated from
// plugins/proto/backend.proto: the gRPC service every attnrun backend process
// serves. Run plugins/gen.sh to regenerate.
package backendpb

//go:generate sh ../gen.sh
