package serve

import (
	"context"
	"errors"
	"fmt"
	"github.com/attnrun/attnrun/runtime/session"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/serve/batch"
	"github.com/attnrun/attnrun/serve/oip"
	"github.com/attnrun/attnrun/serve/runner"
)

// The protocol label of metrics and logs.
const (
	protoHTTP = "http"
	protoGRPC = "grpc"
)

// Infer answers one decoded inference request for a model version
// (version "" is the highest loaded). protocol labels its metrics. Errors
// are *oip.Error values whose class decides the HTTP status or gRPC code.
func (s *Server) Infer(ctx context.Context, protocol, name, version string, req *oip.Request) (*oip.Response, error) {
	start := time.Now()
	resp, l, err := s.infer(ctx, name, version, req)
	outcome := "success"
	if err != nil {
		outcome = oip.ClassOf(err).String()
	}
	if l != nil {
		s.metrics.requests.WithLabelValues(name, l.version, protocol, outcome).Inc()
		s.metrics.latency.WithLabelValues(name, l.version, protocol).Observe(time.Since(start).Seconds())
	}
	switch c := oip.ClassOf(err); {
	case err == nil:
		s.log.Debug("infer", "model", name, "version", resp.ModelVersion, "protocol", protocol, "id", req.ID, "seconds", time.Since(start).Seconds())
	case c == oip.Internal || c == oip.Unavailable || c == oip.DeadlineExceeded:
		s.log.Warn("infer failed", "model", name, "version", version, "protocol", protocol, "id", req.ID, "class", c.String(), "error", err.Error())
	default:
		s.log.Debug("infer refused", "model", name, "version", version, "protocol", protocol, "id", req.ID, "class", c.String(), "error", err.Error())
	}
	return resp, err
}

// Refused counts a request for a known model that failed before Infer
// (a body or message that does not decode) in the request metrics.
func (s *Server) Refused(protocol, name, version string, err error) {
	l, lerr := s.lookup(name, version)
	if lerr != nil {
		return
	}
	defer l.users.Done()
	s.metrics.requests.WithLabelValues(name, l.version, protocol, oip.ClassOf(err).String()).Inc()
	s.log.Debug("infer refused", "model", name, "version", l.version, "protocol", protocol, "class", oip.ClassOf(err).String(), "error", err.Error())
}

func (s *Server) infer(ctx context.Context, name, version string, req *oip.Request) (*oip.Response, *loaded, error) {
	if !s.admit.enter() {
		return nil, nil, oip.Errorf(oip.Unavailable, "the server is shutting down")
	}
	defer s.admit.exit()
	if req.ModelName != "" && req.ModelName != name {
		return nil, nil, oip.Errorf(oip.InvalidArgument, "the request body names model %q, the URL %q", req.ModelName, name)
	}
	if req.ModelVersion != "" && version != "" && req.ModelVersion != version {
		return nil, nil, oip.Errorf(oip.InvalidArgument, "the request body names version %q, the URL %q", req.ModelVersion, version)
	}
	if version == "" {
		version = req.ModelVersion
	}
	l, err := s.lookup(name, version)
	if err != nil {
		return nil, nil, err
	}
	defer l.users.Done()
	in, err := l.checkInputs(req.Inputs)
	if err != nil {
		return nil, l, err
	}
	outputs, err := l.selectOutputs(req)
	if err != nil {
		return nil, l, err
	}
	if s.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
	}
	gauge := s.metrics.inflight.WithLabelValues(name, l.version)
	gauge.Inc()
	out, queued, err := l.sched.Submit(ctx, in)
	gauge.Dec()
	s.metrics.queue.WithLabelValues(name, l.version).Observe(queued.Seconds())
	if err != nil {
		return nil, l, s.runError(ctx, l, err)
	}
	resp := &oip.Response{ModelName: name, ModelVersion: l.version, ID: req.ID, Raw: req.RawOutputs}
	for _, o := range outputs {
		t := out[o.Name]
		if t == nil {
			return nil, l, oip.Errorf(oip.Internal, "model %q version %s made no output %q", name, l.version, o.Name)
		}
		resp.Outputs = append(resp.Outputs, oip.NamedTensor{Name: o.Name, Tensor: t})
		binary := req.BinaryOutputs
		if o.Binary != nil {
			binary = *o.Binary
		}
		resp.Binary = append(resp.Binary, binary)
	}
	return resp, l, nil
}

// runError turns a scheduler or run failure into the protocol's error.
func (s *Server) runError(ctx context.Context, l *loaded, err error) error {
	what := fmt.Sprintf("model %q version %s", l.name, l.version)
	var be *runner.BackendError
	var restart *session.RestartError
	var dims *session.DimConflictError
	switch {
	case errors.Is(err, batch.ErrQueueFull):
		return oip.Errorf(oip.Unavailable, "%s: the request queue is full (%d waiting); retry later", what, l.sched.QueueLength())
	case errors.Is(err, batch.ErrClosed):
		return oip.Errorf(oip.Unavailable, "%s is being unloaded; retry", what)
	case errors.As(err, &be):
		return oip.Errorf(oip.Unavailable, "%s: %v; retry later", what, err)
	case errors.As(err, &restart):
		// No backend to run on (e.g. its model file was replaced since
		// the model was loaded: a rescan or load brings the new one).
		return oip.Errorf(oip.Unavailable, "%s: %v", what, err)
	case errors.As(err, &dims):
		// The request's shapes, not the model, made the node fail.
		return oip.Errorf(oip.InvalidArgument, "%s: %v", what, err)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return oip.Errorf(oip.DeadlineExceeded, "%s: no answer within the request deadline (--request-timeout %v or the client's)", what, s.opts.RequestTimeout)
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return oip.Errorf(oip.Canceled, "%s: the client canceled the request", what)
	}
	return oip.Errorf(oip.Internal, "%s: %v", what, err)
}

// checkInputs checks a request's inputs against the model's: names, the
// protocol datatypes, ranks, fixed dims and symbolic dims bound
// consistently across inputs.
func (l *loaded) checkInputs(inputs []oip.NamedTensor) (map[string]*ir.Tensor, error) {
	in := make(map[string]*ir.Tensor, len(inputs))
	for _, nt := range inputs {
		vi := l.input(nt.Name)
		if vi == nil {
			return nil, oip.Errorf(oip.InvalidArgument, "model %q has no input %q (inputs: %s)", l.name, nt.Name, names(l.inputs))
		}
		if nt.Tensor.DType != vi.Type.DType {
			return nil, oip.Errorf(oip.InvalidArgument, "input %q has datatype %s, the model takes %s", nt.Name, oip.Datatype(nt.Tensor.DType), oip.Datatype(vi.Type.DType))
		}
		in[nt.Name] = nt.Tensor
	}
	if err := l.prog.CheckInputs(in); err != nil {
		return nil, oip.Errorf(oip.InvalidArgument, "%v", err)
	}
	return in, nil
}

// selectOutputs returns the outputs to answer with, in request order (all,
// in model order, when the request names none).
func (l *loaded) selectOutputs(req *oip.Request) ([]oip.RequestedOutput, error) {
	if len(req.Outputs) == 0 {
		out := make([]oip.RequestedOutput, len(l.outputs))
		for i, vi := range l.outputs {
			out[i].Name = vi.Name
		}
		return out, nil
	}
	for _, o := range req.Outputs {
		if l.output(o.Name) == nil {
			return nil, oip.Errorf(oip.InvalidArgument, "model %q has no output %q (outputs: %s)", l.name, o.Name, names(l.outputs))
		}
	}
	return req.Outputs, nil
}

func (l *loaded) input(name string) *ir.ValueInfo  { return find(l.inputs, name) }
func (l *loaded) output(name string) *ir.ValueInfo { return find(l.outputs, name) }

func find(vs []*ir.ValueInfo, name string) *ir.ValueInfo {
	for _, vi := range vs {
		if vi.Name == name {
			return vi
		}
	}
	return nil
}

func names(vs []*ir.ValueInfo) string {
	s := ""
	for i, vi := range vs {
		if i > 0 {
			s += ", "
		}
		s += vi.Name
	}
	return s
}
