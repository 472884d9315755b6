// Package v2pb holds the Go bindings generated from KServe's
// grpc_predict_v2.proto (serve/proto): the messages of the Open Inference
// Protocol and the inference.GRPCInferenceService client and server. Run
// serve/gen.sh to regenerate.
package v2pb

//go:generate sh ../gen.sh
