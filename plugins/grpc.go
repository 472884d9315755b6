package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins/backendpb"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gorgonia.org/tensor"
)

// grpcPlugin binds the Backend service into go-plugin. On the backend side
// impl is set; on the host side it is nil.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Server
	// shm is the backend's mapping of the host's tensor region (nil: none
	// was passed).
	shm *backendShm
	// bell is the backend's doorbell (nil: none was passed; see doorbell.go).
	bell *backendBell
	// arena is the backend's mapping of the session's tensor arena (nil:
	// none was passed; see arena.go).
	arena *backendShm
}

// GRPCServer registers the service (backend side).
func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.impl == nil {
		return errors.New("no backend implementation to serve")
	}
	srv := &grpcServer{impl: p.impl, shm: p.shm, bell: p.bell, arena: p.arena}
	backendpb.RegisterBackendServer(s, srv)
	if p.bell != nil && p.shm != nil {
		p.bell.start(srv)
	}
	return nil
}

// GRPCClient returns the host's client.
func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &client{rpc: backendpb.NewBackendClient(c), parts: map[PartitionID]*partMeta{}}, nil
}

// ---- backend side ----

// grpcServer adapts a Server to the generated service.
type grpcServer struct {
	backendpb.UnimplementedBackendServer
	impl Server
	shm  *backendShm
	bell *backendBell
	// arena maps the session's tensor arena (nil: none); it is used under
	// shm.mu, by Runs that also have the region.
	arena *backendShm
	// copyThreads is the thread count of the last Compile
	// (CompileRequest.threads), which copies Runs' outputs into the region
	// (copyBytes; it splits only copies of 64 MiB and more): process-wide,
	// as the CPU backend's GEMM threads are.
	copyThreads atomic.Int32
}

func (s *grpcServer) Info(ctx context.Context, _ *backendpb.InfoRequest) (*backendpb.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r := &backendpb.InfoResponse{
		Name: info.Name, Version: info.Version, Pid: int64(info.Pid),
		Details: info.Details, ProtocolVersion: ProtocolVersion,
		UnavailableReason: info.UnavailableReason,
	}
	if r.Pid == 0 {
		r.Pid = int64(os.Getpid())
	}
	for _, op := range info.Ops {
		o := &backendpb.OpSupport{Domain: op.Domain, OpType: op.OpType, Since: int32(op.Since), Until: int32(op.Until)}
		for _, d := range op.DTypes {
			o.Dtypes = append(o.Dtypes, int32(d))
		}
		r.Ops = append(r.Ops, o)
	}
	return r, nil
}

func (s *grpcServer) Capability(ctx context.Context, req *backendpb.CapabilityRequest) (*backendpb.CapabilityResponse, error) {
	qs := make([]NodeQuery, len(req.Nodes))
	for i, n := range req.Nodes {
		q := NodeQuery{Name: n.Name, OpType: n.OpType, Domain: n.Domain, Opset: n.Opset}
		for _, d := range n.InputDtypes {
			q.InputDTypes = append(q.InputDTypes, ir.DType(d))
		}
		qs[i] = q
	}
	vs, err := s.impl.Capability(ctx, qs)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if len(vs) != len(qs) {
		return nil, status.Errorf(codes.Internal, "backend answered %d verdicts for %d nodes", len(vs), len(qs))
	}
	r := &backendpb.CapabilityResponse{Verdicts: make([]*backendpb.Verdict, len(vs))}
	for i, v := range vs {
		r.Verdicts[i] = &backendpb.Verdict{Accepted: v.Accepted, Reason: v.Reason}
	}
	return r, nil
}

func (s *grpcServer) Compile(ctx context.Context, req *backendpb.CompileRequest) (*backendpb.CompileResponse, error) {
	id, nodes, err := s.impl.Compile(ctx, req.Model, CompileOptions{Threads: int(req.Threads), MaxTensorBytes: req.MaxTensorBytes, NoFuse: req.NoFuse,
		MaxMemoryBytes: req.MaxMemoryBytes, ModelDir: req.ModelDir, Precision: req.Precision})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.copyThreads.Store(req.Threads)
	r := &backendpb.CompileResponse{PartitionId: uint64(id), Nodes: make([]*backendpb.NodeRef, len(nodes))}
	for i, n := range nodes {
		r.Nodes[i] = &backendpb.NodeRef{Name: n.Name, OpType: n.OpType, Domain: n.Domain}
	}
	return r, nil
}

// Run decodes the inputs (those in the shared region are used in place),
// runs the partition and encodes the outputs: into the request's output area
// while they fit, inline otherwise. The Server may compute outputs straight
// into the output area (OutputInto); the others are copied there.
func (s *grpcServer) Run(ctx context.Context, req *backendpb.RunRequest) (*backendpb.RunResponse, error) {
	var prof *RunProfile
	var mark time.Time
	if req.Profile {
		prof, mark = &RunProfile{}, time.Now()
		ctx = WithProfile(ctx, prof)
	}
	var region []byte // this Run's view of the tensor region
	var area *outputArea
	if sr := req.Shm; sr != nil {
		if s.shm == nil {
			return nil, status.Error(codes.FailedPrecondition, "the host sent shared-memory tensors, but this backend was given no tensor region")
		}
		// Held until the response is built: a later Run cannot remap the
		// region while this one reads or writes it.
		s.shm.mu.Lock()
		defer s.shm.mu.Unlock()
		if s.shm.fence > 0 && sr.Seq <= s.shm.fence {
			return nil, status.Errorf(codes.Aborted, "run %d was abandoned by the host", sr.Seq)
		}
		if err := s.shm.ensure(sr.Size); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		region = s.shm.mem[:sr.Size:sr.Size]
		if sr.OutOffset > sr.Size || sr.OutLength > sr.Size-sr.OutOffset {
			return nil, status.Errorf(codes.InvalidArgument, "output area [%d, +%d) lies outside the %d-byte region", sr.OutOffset, sr.OutLength, sr.Size)
		}
		area = &outputArea{region: region, start: sr.OutOffset, off: sr.OutOffset, end: sr.OutOffset + sr.OutLength}
	}
	arena, bound, err := s.arenaOfRun(req, region)
	if err != nil {
		return nil, err
	}
	in := make(map[string]*ir.Tensor, len(req.Inputs))
	for _, nt := range req.Inputs {
		if _, dup := in[nt.Name]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "input %q given twice", nt.Name)
		}
		var t *ir.Tensor
		var err error
		switch {
		case nt.Tensor != nil && nt.Tensor.Shm != nil && nt.Tensor.Shm.Arena:
			t, err = shmTensor(nt.Tensor, arena, false, 1)
		case nt.Tensor != nil && nt.Tensor.Shm != nil && region == nil:
			err = errors.New("refers to the shared region, but the request has none")
		case nt.Tensor != nil && nt.Tensor.Shm != nil:
			t, err = shmTensor(nt.Tensor, region, false, 1)
		default:
			t, err = fromWire(nt.Tensor, 0)
		}
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "input %q: %v", nt.Name, err)
		}
		in[nt.Name] = t
	}
	if region != nil {
		ctx = withOutputInto(ctx, bound.float32s(area))
	}
	if prof != nil {
		prof.Decode, mark = since(mark), time.Now()
	}
	out, err := s.impl.Run(ctx, PartitionID(req.PartitionId), in)
	if err != nil {
		if ctx.Err() != nil {
			// The host's deadline (or cancellation), not a failure of the
			// partition: say so, so that the host reports it as such.
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(codes.Unknown, err.Error())
	}
	if prof != nil {
		prof.Run, mark = since(mark), time.Now()
	}
	threads := int(s.copyThreads.Load())
	r := &backendpb.RunResponse{Outputs: make([]*backendpb.NamedTensor, 0, len(out))}
	var inPlaceNames []string // outputs computed into the output area or the arena (profiled runs)
	for name, t := range out {
		if t == nil {
			return nil, status.Errorf(codes.Internal, "output %q: no tensor", name)
		}
		if err := t.Check(); err != nil {
			return nil, status.Errorf(codes.Internal, "output %q: %v", name, err)
		}
		if shmEligible(t) {
			if w, inPlace, ok := bound.answer(name, t, arena, threads); ok {
				// In the arena: computed into its bound tensor there, or
				// copied there, or a view of an input there.
				if inPlace && prof != nil {
					inPlaceNames = append(inPlaceNames, name)
				}
				r.Outputs = append(r.Outputs, &backendpb.NamedTensor{Name: name, Tensor: w})
				continue
			}
			need := uint64(alignUp(t.Bytes()))
			if off, ok := within(bytesOf(t.Data), region); ok {
				// Computed into the output area (OutputInto), or a view
				// of an input in the region (Identity, Reshape):
				// described in place, no copy. The host copies it out
				// before the region is written again.
				if uint64(off) >= area.start {
					r.OutputBytes += need
					if prof != nil {
						inPlaceNames = append(inPlaceNames, name)
					}
				}
				r.Outputs = append(r.Outputs, &backendpb.NamedTensor{Name: name, Tensor: shmRef(t, off)})
				continue
			}
			r.OutputBytes += need
			if off, ok := area.take(need); ok {
				r.Outputs = append(r.Outputs, &backendpb.NamedTensor{Name: name, Tensor: putShm(region, off, t, threads)})
				continue
			}
			if overlaps(bytesOf(t.Data), region) || OutputsCopied(ctx) {
				// Inline bytes are marshalled after this handler returns
				// and the region's lock is released: detach them (from
				// the region, or from buffers the backend reuses).
				t = t.Clone()
			}
		}
		w, err := toWire(t)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "output %q: %v", name, err)
		}
		r.Outputs = append(r.Outputs, &backendpb.NamedTensor{Name: name, Tensor: w})
	}
	if prof != nil {
		prof.Encode = since(mark)
		sort.Strings(inPlaceNames)
		prof.OutputsInPlace = inPlaceNames
		r.Profile = profileToWire(prof)
	}
	if rel, ok := s.impl.(OutputsReleaser); ok && OutputsCopied(ctx) {
		rel.OutputsReleased()
	}
	return r, nil
}

// OutputsReleaser is implemented by a Server that wants to know when the
// outputs of a Run it returned under OutputsCopied are no longer used (the
// response holds copies): its run memory is idle from then on.
type OutputsReleaser interface {
	OutputsReleased()
}

func (s *grpcServer) Release(ctx context.Context, req *backendpb.ReleaseRequest) (*backendpb.ReleaseResponse, error) {
	if err := s.impl.Release(ctx, PartitionID(req.PartitionId)); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &backendpb.ReleaseResponse{}, nil
}

// Ping answers at once; with a fence, once no Run holds the region, and
// after fencing off every Run numbered up to it (see shm.go).
func (s *grpcServer) Ping(ctx context.Context, req *backendpb.PingRequest) (*backendpb.PingResponse, error) {
	if req.Fence > 0 && s.shm != nil {
		s.bell.cancelUpTo(req.Fence) // a doorbell run the host abandoned
		if err := s.shm.lockBefore(ctx); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		s.shm.fence = max(s.shm.fence, req.Fence)
		s.shm.mu.Unlock()
	}
	return &backendpb.PingResponse{Pid: int64(os.Getpid())}, nil
}

func (s *grpcServer) Stats(ctx context.Context, _ *backendpb.StatsRequest) (*backendpb.StatsResponse, error) {
	st, err := s.impl.Stats(ctx)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &backendpb.StatsResponse{MaxRssBytes: st.MaxRSSBytes, Partitions: int64(st.Partitions), Runs: st.Runs}, nil
}

// ---- host side ----

// partMeta is what the host client remembers about a compiled partition.
type partMeta struct {
	inputs  map[string]ir.DType
	outputs map[string]ir.DType
	nodes   []NodeRef
	// threads is the partition's thread count (CompileOptions.Threads),
	// which also copies its tensors (copyBytes).
	threads int
	// bound is held by an in-process Run whose outputs are all bound,
	// from running the partition into the memory its program reuses to
	// copying the outputs out (see InProcess.RunInto).
	bound sync.Mutex
}

// newPartMeta describes partition m, compiled into nodes.
func newPartMeta(m *ir.Model, nodes []NodeRef) *partMeta {
	meta := &partMeta{inputs: map[string]ir.DType{}, outputs: map[string]ir.DType{}, nodes: nodes}
	for _, vi := range m.Graph.Inputs {
		meta.inputs[vi.Name] = vi.Type.DType
	}
	for _, vi := range m.Graph.Outputs {
		meta.outputs[vi.Name] = vi.Type.DType
	}
	return meta
}

// client implements Backend over gRPC.
type client struct {
	rpc backendpb.BackendClient
	// shm is the tensor region shared with the backend (nil: tensors travel
	// inline). Launch sets it.
	shm *hostShm
	// bell rings Runs past gRPC (nil: every Run goes over gRPC; see
	// doorbell.go), and gone reports the backend's death to a Run waiting
	// on it. Launch sets both.
	bell *hostBell
	gone func() bool
	// arena is the session's tensor arena (nil: none; see arena.go), and
	// done is closed once the backend process has exited. Launch sets both.
	arena *Arena
	done  <-chan struct{}
	// drainFailed is told when a backend did not confirm that it let go of
	// the region (timedOut: it did not answer in time); Launch sets it.
	drainFailed func(timedOut bool)

	mu    sync.Mutex
	parts map[PartitionID]*partMeta
}

// rpcError turns a gRPC status from the backend into a plain error carrying
// the backend's message; transport failures keep their status so that the
// caller can tell a dead backend (codes.Unavailable) apart.
func rpcError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", what, err)
	}
	return &RemoteError{Op: what, Msg: ir.Elide(st.Message())}
}

// RemoteError is an error the backend returned (as opposed to a transport
// failure): Msg is the backend's own message.
type RemoteError struct {
	Op  string
	Msg string
}

// Error returns the backend's message.
func (e *RemoteError) Error() string { return e.Msg }

func (c *client) Info(ctx context.Context) (*Info, error) {
	r, err := c.rpc.Info(ctx, &backendpb.InfoRequest{})
	if err != nil {
		return nil, rpcError("info", err)
	}
	info := &Info{Name: r.Name, Version: r.Version, Pid: int(r.Pid), Details: r.Details, ProtocolVersion: int(r.ProtocolVersion), UnavailableReason: r.UnavailableReason}
	if info.Details == nil {
		info.Details = map[string]string{}
	}
	for _, o := range r.Ops {
		op := OpSupport{Domain: o.Domain, OpType: o.OpType, Since: int(o.Since), Until: int(o.Until)}
		for _, d := range o.Dtypes {
			op.DTypes = append(op.DTypes, ir.DType(d))
		}
		info.Ops = append(info.Ops, op)
	}
	return info, nil
}

func (c *client) Capability(ctx context.Context, nodes []NodeQuery) ([]Verdict, error) {
	req := &backendpb.CapabilityRequest{Nodes: make([]*backendpb.NodeQuery, len(nodes))}
	for i, n := range nodes {
		q := &backendpb.NodeQuery{Name: n.Name, OpType: n.OpType, Domain: n.Domain, Opset: n.Opset}
		for _, d := range n.InputDTypes {
			q.InputDtypes = append(q.InputDtypes, int32(d))
		}
		req.Nodes[i] = q
	}
	r, err := c.rpc.Capability(ctx, req)
	if err != nil {
		return nil, rpcError("capability", err)
	}
	if len(r.Verdicts) != len(nodes) {
		return nil, fmt.Errorf("capability: backend answered %d verdicts for %d nodes", len(r.Verdicts), len(nodes))
	}
	vs := make([]Verdict, len(r.Verdicts))
	for i, v := range r.Verdicts {
		vs[i] = Verdict{Accepted: v.Accepted, Reason: v.Reason}
	}
	return vs, nil
}

func (c *client) Compile(ctx context.Context, m *ir.Model, opts CompileOptions) (PartitionID, error) {
	if m == nil || m.Graph == nil {
		return 0, errors.New("compile: partition has no graph")
	}
	req, err := compileRequest(m, opts)
	if err != nil {
		return 0, err
	}
	r, err := c.rpc.Compile(ctx, req)
	if err != nil {
		return 0, rpcError("compile", err)
	}
	nodes := make([]NodeRef, len(r.Nodes))
	for i, n := range r.Nodes {
		nodes[i] = NodeRef{Name: n.Name, OpType: n.OpType, Domain: n.Domain}
	}
	meta := newPartMeta(m, nodes)
	meta.threads = opts.Threads
	id := PartitionID(r.PartitionId)
	c.mu.Lock()
	c.parts[id] = meta
	c.mu.Unlock()
	return id, nil
}

// compileRequest encodes a partition for Compile. Weights loaded from
// external data go as references to their files (onnx.EncodeExternal),
// which the backend reads itself: no weight bytes in the message, so that
// a model past gRPC's 2 GiB limit loads, and the host never holds an
// encoded copy of its weights.
func compileRequest(m *ir.Model, opts CompileOptions) (*backendpb.CompileRequest, error) {
	data, dir, err := onnx.EncodeExternal(m)
	if err != nil {
		return nil, fmt.Errorf("compile: encoding partition: %w", err)
	}
	return &backendpb.CompileRequest{Model: data, Threads: int32(opts.Threads), MaxTensorBytes: opts.MaxTensorBytes, NoFuse: opts.NoFuse,
		MaxMemoryBytes: opts.MaxMemoryBytes, ModelDir: dir, Precision: opts.Precision}, nil
}

func (c *client) meta(id PartitionID) *partMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parts[id]
}

func (c *client) Run(ctx context.Context, id PartitionID, inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	return c.RunInto(ctx, id, inputs, nil)
}

func (c *client) RunInto(ctx context.Context, id PartitionID, inputs, into map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	prof := ProfileFrom(ctx)
	var mark time.Time
	if prof != nil {
		mark = time.Now()
		prof.Host.Start = mark
		defer func() { prof.Host = since(prof.Host.Start) }()
	}
	meta := c.meta(id)
	if meta == nil {
		return nil, fmt.Errorf("run: unknown partition %d", id)
	}
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names) // a stable layout in the region
	ts := make([]*ir.Tensor, len(names))
	var inBytes int64
	for i, name := range names {
		t, err := denseToIR(inputs[name], meta.inputs[name])
		if err != nil {
			return nil, fmt.Errorf("run: input %q: %w", name, err)
		}
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("run: input %q: %w", name, err)
		}
		ts[i] = t
		if shmEligible(t) {
			inBytes += alignUp(t.Bytes())
		}
	}
	req := &backendpb.RunRequest{PartitionId: uint64(id), Inputs: make([]*backendpb.NamedTensor, 0, len(inputs))}
	var region []byte
	var seq uint64
	held := false // this Run holds the region, and must release it
	defer func() {
		if held {
			c.shm.release()
		}
	}()
	if h := c.shm; h != nil {
		// One Run at a time owns the region, from writing the inputs to
		// copying the outputs out (or, when abandoned, until the backend
		// confirms it let go of it: see shm.go).
		if err := h.acquire(ctx); err != nil {
			return nil, err
		}
		held = true
		h.seq++
		seq = h.seq
		size, err := h.reserve(inBytes+h.expectOutput(id, inBytes), inBytes)
		if err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
		region = h.mem[:size:size]
	}
	// Tensors in the arena are passed as they lie, pinned for this Run;
	// but an input that a bound output overlaps goes through the region,
	// so that writing the output cannot change it (or a view of it).
	pins := arenaPins{a: c.arena}
	var intoBytes map[string][]byte
	if c.arena != nil {
		intoBytes = denseBytesOf(into)
	}
	abandoned := false
	defer func() {
		if !abandoned {
			pins.unpin()
		}
	}()
	var off int64
	for i, t := range ts {
		if region != nil && shmEligible(t) {
			if at, ok := pins.ref(bytesOf(t.Data), intoBytes, ""); ok {
				req.Inputs = append(req.Inputs, &backendpb.NamedTensor{Name: names[i], Tensor: arenaRef(t, at)})
				if prof != nil {
					prof.InputsShared = append(prof.InputsShared, names[i])
				}
				continue
			}
			if need := alignUp(t.Bytes()); need <= int64(len(region))-off {
				req.Inputs = append(req.Inputs, &backendpb.NamedTensor{Name: names[i], Tensor: putShm(region, off, t, meta.threads)})
				off += need
				continue
			}
			// Too large for the region even after growing: this tensor
			// falls back to inline bytes in the message.
		}
		w, err := toWire(t)
		if err != nil {
			return nil, fmt.Errorf("run: input %q: %w", names[i], err)
		}
		req.Inputs = append(req.Inputs, &backendpb.NamedTensor{Name: names[i], Tensor: w})
	}
	if region != nil {
		size := uint64(len(region))
		req.Shm = &backendpb.SharedRun{Size: size, OutOffset: uint64(off), OutLength: size - uint64(off), Seq: seq}
		req.Bound = boundInArena(&pins, meta, into, intoBytes)
	}
	if len(pins.blocks) > 0 {
		size, err := pins.pin(ctx)
		if err != nil {
			pins.blocks = nil
			return nil, err
		}
		req.ArenaSize = uint64(size)
	}
	if prof != nil {
		req.Profile = true
		prof.WriteInputs, mark = since(mark), time.Now()
	}
	var r *backendpb.RunResponse
	var err error
	if c.bell != nil && c.bell.fits(req) {
		r, err = c.bell.run(ctx, req, c.gone)
		if errors.Is(err, errTooLarge) {
			r, err = c.rpc.Run(ctx, req) // too large for the page: over gRPC
		}
	} else {
		r, err = c.rpc.Run(ctx, req)
	}
	if err != nil {
		err = rpcError("run", err)
		var remote *RemoteError
		if held && !errors.As(err, &remote) {
			// The backend may still use the region for this Run: the
			// drain releases it once it has let go (see shm.go).
			held = false
			abandoned = true
			go c.drain(seq, pins.abandon())
		}
		return nil, err
	}
	if prof != nil {
		prof.Call, mark = since(mark), time.Now()
		prof.fromWire(r.Profile)
		defer func() { prof.ReadOutputs = since(mark) }()
	}
	if region != nil {
		c.shm.learnOutput(id, inBytes, r.OutputBytes)
	}
	out := make(map[string]*tensor.Dense, len(r.Outputs))
	for _, nt := range r.Outputs {
		dst := into[nt.Name]
		var t *ir.Tensor
		var err error
		var mem []byte // the memory a shared-memory output lies in
		if nt.Tensor != nil && nt.Tensor.Shm != nil {
			mem, err = c.sharedMem(nt.Tensor.Shm, region, req.ArenaSize)
		}
		switch {
		case err != nil:
		case mem != nil && dst != nil && plainBytes(ir.DType(nt.Tensor.Dtype)):
			// Straight into the caller's tensor, or already there (a
			// bound output in the arena).
			var copied bool
			if copied, err = copyShmInto(dst, nt.Tensor, mem, meta.threads); err == nil {
				out[nt.Name] = dst
				if !copied && prof != nil {
					prof.OutputsShared = append(prof.OutputsShared, nt.Name)
				}
				continue
			}
		case mem != nil:
			// Copied out: the result must outlive the region's next Run
			// (or, from the arena, the caller's next write).
			if err = c.shm.copyOutFits(nt.Tensor); err == nil {
				t, err = shmTensor(nt.Tensor, mem, true, meta.threads)
			}
		default:
			t, err = fromWire(nt.Tensor, 0)
		}
		if err == nil && dst != nil {
			if err = BindOutput(dst, t); err == nil {
				out[nt.Name] = dst
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("run: output %q: %w", nt.Name, err)
		}
		d, err := ir.ToDense(t)
		if err != nil {
			return nil, fmt.Errorf("run: output %q: %w", nt.Name, err)
		}
		out[nt.Name] = d
	}
	if prof != nil {
		sort.Strings(prof.OutputsShared)
	}
	return out, nil
}

// denseToIR converts a Dense, reading a uint16 Dense as float16 or bfloat16
// (and a byte Dense as a narrow type) when the partition declares the input so.
func denseToIR(d *tensor.Dense, declared ir.DType) (*ir.Tensor, error) {
	return ir.FromDenseDeclared(d, declared)
}

// drain holds the region for the abandoned Run seq until the backend
// answers a Ping fenced at seq, then releases it. When the backend does not
// answer (within PingTimeout), the region stays unusable and drainFailed
// decides the backend's fate.
//
// letGo releases the abandoned Run's arena tensors: once the backend
// confirmed, or else once its process has exited (drainFailed kills a
// backend that did not answer).
func (c *client) drain(seq uint64, letGo func()) {
	h := c.shm
	ctx, cancel := context.WithTimeout(context.Background(), PingTimeout)
	err := c.ping(ctx, seq)
	timedOut := ctx.Err() != nil
	cancel()
	if err != nil {
		h.broken = true
	}
	h.release()
	if err == nil {
		letGo()
		return
	}
	if c.drainFailed != nil {
		c.drainFailed(timedOut)
	}
	if c.done != nil {
		<-c.done
	}
	letGo()
}

// ping sends Ping with fence (0: a plain liveness check).
func (c *client) ping(ctx context.Context, fence uint64) error {
	if _, err := c.rpc.Ping(ctx, &backendpb.PingRequest{Fence: fence}); err != nil {
		return rpcError("ping", err)
	}
	return nil
}

func (c *client) Release(ctx context.Context, id PartitionID) error {
	if _, err := c.rpc.Release(ctx, &backendpb.ReleaseRequest{PartitionId: uint64(id)}); err != nil {
		return rpcError("release", err)
	}
	c.mu.Lock()
	delete(c.parts, id)
	c.mu.Unlock()
	if h := c.shm; h != nil {
		h.mu.Lock()
		delete(h.outBytes, id)
		h.mu.Unlock()
	}
	return nil
}

func (c *client) Stats(ctx context.Context) (*Stats, error) {
	r, err := c.rpc.Stats(ctx, &backendpb.StatsRequest{})
	if err != nil {
		return nil, rpcError("stats", err)
	}
	return &Stats{MaxRSSBytes: r.MaxRssBytes, Partitions: int(r.Partitions), Runs: r.Runs}, nil
}

// outputIntoKey holds, in a Server's Run context, the protocol layer's
// OutputInto function; the layers that give one also copy the outputs
// away before another Run (OutputsCopied), so its presence says both.
type outputIntoKey struct{}

// withOutputInto marks ctx's Run as one whose outputs the protocol layer
// copies away, with into for OutputInto.
func withOutputInto(ctx context.Context, into func(string, []int) []float32) context.Context {
	return context.WithValue(ctx, outputIntoKey{}, into)
}

// OutputInto returns, inside a Server's Run, where the protocol layer would
// like float32 outputs computed (graph.RunOptions.OutputInto): given an
// output's name and shape, a slice of the shared region's output area of
// exactly that many elements, or nil when what is left of the area cannot
// hold it (a smaller output asked for later may still fit). An output
// computed there is sent as it lies, without the copy into the region; the
// memory is the Run's until it returns. In process, with every output
// bound, it gives the bound tensors' memory instead (see
// InProcess.RunInto). It returns nil otherwise (inline tensors, outputs
// not all bound in process).
func OutputInto(ctx context.Context) func(name string, shape []int) []float32 {
	f, _ := ctx.Value(outputIntoKey{}).(func(string, []int) []float32)
	return f
}

// outputArea hands out the output area [start, end) of a Run's region: to
// outputs computed in place (float32s) and to those copied there (take).
type outputArea struct {
	region          []byte
	start, off, end uint64
}

// take reserves need bytes (a multiple of shmAlign) of the area, returning
// their offset; false when they do not fit (or there is no area).
func (a *outputArea) take(need uint64) (int64, bool) {
	if a == nil || need > a.end-a.off {
		return 0, false
	}
	off := a.off
	a.off += need
	return int64(off), true
}

// float32s is OutputInto for the area: room for a float32 tensor of shape
// dims, or nil when it is empty or does not fit.
func (a *outputArea) float32s(_ string, dims []int) []float32 {
	n := ir.NumElements(dims)
	if n <= 0 {
		return nil
	}
	off, ok := a.take(uint64(alignUp(4 * n)))
	if !ok {
		return nil
	}
	d, ok := ir.AliasBytes(ir.Float, a.region[off:off+4*n], int(n))
	if !ok {
		return nil
	}
	return d.([]float32)
}

// OutputsCopied reports, inside a Server's Run, whether the protocol layer
// copies the returned outputs away (into the shared region, or into detached
// bytes, or in process into the caller's bound tensors) before another Run
// can start on this backend (in process: of this partition). A backend may then
// return outputs in memory it reuses on the next run, saving an allocation
// and its page faults per output.
func OutputsCopied(ctx context.Context) bool {
	return ctx.Value(outputIntoKey{}) != nil
}
