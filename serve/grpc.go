package serve

import (
	"context"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/v2pb"
)

// GRPCServerOptions are the options of the gRPC server that `attnrun
// serve` runs: requests up to maxRequestBytes, responses of any size.
// (Larger flow-control windows and transport buffers, tried for 393 KB
// requests, did not lower the server's CPU per request measurably.)
func GRPCServerOptions(maxRequestBytes int64) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(maxRequestBytes, math.MaxInt32))),
		grpc.MaxSendMsgSize(math.MaxInt32),
	}
}

// RegisterGRPC registers the server's inference.GRPCInferenceService
// (KServe's grpc_predict_v2.proto) on a gRPC server.
func (s *Server) RegisterGRPC(g *grpc.Server) {
	v2pb.RegisterGRPCInferenceServiceServer(g, &grpcAPI{s: s})
}

type grpcAPI struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

// grpcError turns an error into a gRPC status with the class's code.
func grpcError(err error) error {
	return status.Error(oip.GRPCCode(oip.ClassOf(err)), err.Error())
}

func (g *grpcAPI) ServerLive(context.Context, *v2pb.ServerLiveRequest) (*v2pb.ServerLiveResponse, error) {
	return &v2pb.ServerLiveResponse{Live: true}, nil
}

func (g *grpcAPI) ServerReady(context.Context, *v2pb.ServerReadyRequest) (*v2pb.ServerReadyResponse, error) {
	return &v2pb.ServerReadyResponse{Ready: g.s.Ready()}, nil
}

func (g *grpcAPI) ModelReady(_ context.Context, r *v2pb.ModelReadyRequest) (*v2pb.ModelReadyResponse, error) {
	ok, err := g.s.ModelReady(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &v2pb.ModelReadyResponse{Ready: ok}, nil
}

func (g *grpcAPI) ServerMetadata(context.Context, *v2pb.ServerMetadataRequest) (*v2pb.ServerMetadataResponse, error) {
	md := g.s.ServerMetadata()
	return &v2pb.ServerMetadataResponse{Name: md.Name, Version: md.Version, Extensions: md.Extensions}, nil
}

func (g *grpcAPI) ModelMetadata(_ context.Context, r *v2pb.ModelMetadataRequest) (*v2pb.ModelMetadataResponse, error) {
	md, err := g.s.ModelMetadata(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	tm := func(ts []TensorMetadata) []*v2pb.ModelMetadataResponse_TensorMetadata {
		out := make([]*v2pb.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &v2pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return out
	}
	return &v2pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform, Inputs: tm(md.Inputs), Outputs: tm(md.Outputs)}, nil
}

func (g *grpcAPI) ModelInfer(ctx context.Context, m *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	if m.GetModelName() == "" {
		return nil, grpcError(oip.Errorf(oip.InvalidArgument, "model_name is empty"))
	}
	if err := g.s.CheckModel(m.GetModelName(), m.GetModelVersion()); err != nil {
		return nil, grpcError(err)
	}
	req, err := oip.DecodeGRPCRequest(m, oip.Limits{MaxTensorBytes: g.s.opts.MaxTensorBytes})
	if err != nil {
		g.s.Refused(protoGRPC, m.GetModelName(), m.GetModelVersion(), err)
		return nil, grpcError(err)
	}
	resp, err := g.s.Infer(ctx, protoGRPC, m.GetModelName(), m.GetModelVersion(), req)
	if err != nil {
		return nil, grpcError(err)
	}
	return oip.EncodeGRPCResponse(resp), nil
}

func (g *grpcAPI) RepositoryModelLoad(ctx context.Context, r *v2pb.RepositoryModelLoadRequest) (*v2pb.RepositoryModelLoadResponse, error) {
	if err := g.s.loadRequested(ctx, r.GetModelName(), protoGRPC); err != nil {
		return nil, grpcError(err)
	}
	return &v2pb.RepositoryModelLoadResponse{ModelName: r.GetModelName(), IsLoaded: true}, nil
}

func (g *grpcAPI) RepositoryModelUnload(_ context.Context, r *v2pb.RepositoryModelUnloadRequest) (*v2pb.RepositoryModelUnloadResponse, error) {
	if err := g.s.Unload(r.GetModelName()); err != nil {
		return nil, grpcError(err)
	}
	return &v2pb.RepositoryModelUnloadResponse{ModelName: r.GetModelName(), IsUnloaded: true}, nil
}
