// Package plugins is the protocol between attnrun and its backends. A backend
// is a separate process (the attnrun binary re-executed as the CPU backend, or
// an attnrun-backend-<name> executable) served through hashicorp/go-plugin
// over gRPC (service attnrun.backend.v1.Backend in proto/backend.proto).
//
// The host compiles each partition of a model once (its weights travel once
// and stay resident in the backend) and then runs it on named tensors. The
// host side is the Backend interface, obtained from Launch; a backend
// implements Server and calls Serve from its main.
//
// Crash reporting: the host shares one memory page with every backend it
// launches (a memfd passed as fd 3, named by ATTNRUN_STATUS_FD). Before each
// node the backend records the partition and node index there
// (StatusWriter.Running); when a Run fails because the process died, the host
// reads the page and the error (*DiedError) names the node that was running.
//
// Tensors: the host also shares a tensor region with every backend (a second
// memfd, named by ATTNRUN_SHM_FD). Run writes the inputs there and the
// backend its outputs, so gRPC carries only descriptors; tensors that do not
// fit travel as bytes in the messages. See shm.go.
//
// Lifecycle: a backend leads its own process group, dies with its host
// (parent-death signal) and is killed as a group (procrunner.go). Every
// control call has a default deadline, a Run in flight is watched by
// health checks, a Run whose context ends returns at once, and a backend
// that stops answering is killed (deadlines.go). Plugin executables are
// verified, and optionally pinned by SHA-256, before they are listed or run
// (verify.go).
//
// In process: a Server can also run inside the host, behind the same
// interface (InProcess, inprocess.go), trading crash isolation for latency.
package plugins

import (
	"context"

	"github.com/attnrun/attnrun/ir"
	"gorgonia.org/tensor"
)

// ProtocolVersion is the backend protocol version; the host and a backend
// must agree on it during the go-plugin handshake. Version 2 added tensors
// in the shared region (shm.go). Version 3 added the memory budget and
// external-data weights passed by reference (CompileRequest.model_dir): a
// backend of version 2 would fail to decode such a partition. It also
// added the Ping RPC and SharedRun.seq, with which the host fences off a
// Run it abandoned before it reuses the region. Version 4 added the
// session's tensor arena (arena.go: ShmRef.arena, RunRequest.bound and
// arena_size), which a backend of version 3 would read as offsets into its
// region.
const ProtocolVersion = 4

// Handshake values shared by host and backends. The cookie is not a security
// measure: it keeps a backend executable from being run by hand by mistake.
const (
	MagicCookieKey   = "ATTNRUN_BACKEND_PLUGIN"
	MagicCookieValue = "attnrun-backend-v1-4d3b8f1e"
)

// PluginName is the name the backend is dispensed under in go-plugin.
const PluginName = "backend"

// MaxMessageBytes is the gRPC message size limit set on both sides of the
// connection (gRPC's default of 4 MiB would refuse real weights). A protobuf
// message cannot exceed 2 GiB, so neither can a partition's encoding.
const MaxMessageBytes = 1<<31 - 1

// PartitionID names a partition compiled in one backend process. IDs are
// local to that process: a restarted backend hands out new ones.
type PartitionID uint64

// OpSupport is one op over an opset range that a backend runs.
type OpSupport struct {
	Domain string
	OpType string
	// Since and Until bound the opset versions, inclusive.
	Since, Until int
	// DTypes are the element types the op takes at its type input; empty
	// means any.
	DTypes []ir.DType
}

// Info describes a running backend.
type Info struct {
	Name    string
	Version string
	Pid     int
	// Details are free-form facts, e.g. "blas": "go", "threads": "2",
	// "max_rss_bytes".
	Details map[string]string
	Ops     []OpSupport
	// ProtocolVersion is the protocol the backend speaks.
	ProtocolVersion int
	// UnavailableReason, when set, says why the backend cannot compute on
	// this machine (no driver, no device); the host must not use it.
	UnavailableReason string
}

// NodeQuery describes one node for Capability.
type NodeQuery struct {
	Name   string
	OpType string
	Domain string
	// Opset is the version of the node's domain the model imports.
	Opset int64
	// InputDTypes has one entry per node input (Undefined for an omitted
	// optional input or an unknown type).
	InputDTypes []ir.DType
}

// Verdict is a backend's answer for one node.
type Verdict struct {
	Accepted bool
	// Reason says why a node was refused.
	Reason string
}

// CompileOptions tune the compilation of a partition.
type CompileOptions struct {
	// Threads is the number of compute threads (0: the backend's default).
	Threads int
	// MaxTensorBytes bounds any one tensor (0: the backend's default).
	MaxTensorBytes int64
	// NoFuse turns off graph rewrites such as attention fusion.
	NoFuse bool
	// MaxMemoryBytes is the session's memory budget, which the backend
	// keeps its weights, constants, plans and run memory within (0: the
	// backend's default, budget.DefaultLimit; negative: none).
	MaxMemoryBytes int64
	// ModelDir, set on the backend's side, is the directory the
	// partition's external-data references are relative to: pass it to
	// onnx.Decode as Options.BaseDir. The host sends weights loaded from
	// external data as references to their files (onnx.EncodeExternal), so
	// that however large they are they never travel in a message.
	ModelDir string
	// Precision is the arithmetic of float32 matrix products: "" or
	// "fp32", or "bf16" (operands rounded to bfloat16, fp32 accumulation;
	// see ops.Precision). A backend that cannot honour it refuses the
	// partition with an error that says why.
	Precision string
}

// NodeRef names a node of a compiled partition; Compile returns them in
// execution order, and the status page's node index points into that list.
type NodeRef struct {
	Name   string
	OpType string
	Domain string
}

// NodeRefs describes nodes (a compiled partition's execution order) for
// Server.Compile's answer.
func NodeRefs(order []*ir.Node) []NodeRef {
	refs := make([]NodeRef, len(order))
	for i, n := range order {
		refs[i] = NodeRef{Name: n.Label(), OpType: n.OpType, Domain: n.Domain}
	}
	return refs
}

// Label is the node's name, or its op type when it has none.
func (r NodeRef) Label() string {
	if r.Name != "" {
		return r.Name
	}
	return r.OpType
}

// QualifiedOp is "OpType" or "domain:OpType".
func (r NodeRef) QualifiedOp() string {
	if r.Domain == "" || r.Domain == "ai.onnx" {
		return r.OpType
	}
	return r.Domain + ":" + r.OpType
}

// Stats are a backend process's resource counters.
type Stats struct {
	// MaxRSSBytes is the process's peak resident set size (getrusage).
	MaxRSSBytes int64
	// Partitions is the number of partitions compiled and not released.
	Partitions int
	// Runs counts Run calls served.
	Runs uint64
}

// Backend is the host's view of a backend process. Tensors cross the API as
// gorgonia Dense values (float16 as uint16 Dense, see ir.ToDense).
type Backend interface {
	Info(ctx context.Context) (*Info, error)
	Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error)
	// Compile sends a partition (encoded as an ONNX ModelProto) to the
	// backend, which keeps it, weights included, until Release.
	Compile(ctx context.Context, partition *ir.Model, opts CompileOptions) (PartitionID, error)
	Run(ctx context.Context, id PartitionID, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error)
	// RunInto is Run writing the outputs named in into into those
	// caller-owned tensors, which must have the outputs' element types and
	// shapes (output binding, like ONNX Runtime's IOBinding).
	RunInto(ctx context.Context, id PartitionID, inputs, into map[string]*tensor.Dense) (map[string]*tensor.Dense, error)
	Release(ctx context.Context, id PartitionID) error
	Stats(ctx context.Context) (*Stats, error)
}

// Server is what a backend process implements; Serve exposes it over gRPC.
// Run is called with validated tensors (dtype, shape and data length agree).
type Server interface {
	Info(ctx context.Context) (*Info, error)
	Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error)
	// Compile receives a partition as ONNX ModelProto bytes and returns its
	// id and its nodes in execution order (the order of the node indices the
	// backend writes to the status page). Weights in external data are
	// references relative to opts.ModelDir.
	Compile(ctx context.Context, model []byte, opts CompileOptions) (PartitionID, []NodeRef, error)
	Run(ctx context.Context, id PartitionID, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error)
	Release(ctx context.Context, id PartitionID) error
	Stats(ctx context.Context) (*Stats, error)
}
