// Package graph turns a decoded model into a runnable program: it validates
// and schedules the op DAG, binds every node to its op schema at the model's
// opset, infers element types and symbolic shapes, folds what is constant,
// and executes the graph with per-input-shape plans (see plan.go).
package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/budget"
)

// DefaultMaxTensorBytes bounds any single tensor the program may create.
const DefaultMaxTensorBytes int64 = 4 << 30

// maxFoldElements bounds the tensors computed at compile or plan time.
const maxFoldElements = 1 << 22

// Options tune compilation and execution.
type Options struct {
	// Threads is the number of compute threads kernels may use (default 1).
	Threads int
	// MaxTensorBytes bounds any single tensor the program creates; a plan
	// that would exceed it fails before running (default DefaultMaxTensorBytes).
	MaxTensorBytes int64
	// NoFuse turns off the plan-time rewrites: the attention fusion
	// (fuse.go), which replaces each MatMul → scale → mask → Softmax →
	// MatMul chain by one com.attnrun:FusedAttention step, the MatMul
	// rewrite (fuse_matmul.go), which folds transposes, head-split views and
	// bias Adds into com.attnrun:FusedMatMul, and the GELU rewrite
	// (fuse_gelu.go), which makes the exported x·0.5·(1 + Erf(x/√2)) one
	// Gelu, and the layer norm rewrite (fuse_layernorm.go), which makes
	// the ReduceMean/Sub/Pow/Sqrt/Div chain of opset < 17 exports one
	// LayerNormalization.
	NoFuse bool
	// AllowInternalOps lets the model's own nodes use the com.attnrun
	// domain, attnrun's internal ops, which only its graph rewrites make
	// (with attributes they have checked). A model loaded from a user
	// never gets it: its nodes in that domain are refused, so that it
	// cannot hand a fused kernel views or flags of its own making. Tests
	// that build fused nodes by hand set it.
	AllowInternalOps bool
	// Budget is the memory budget the program's allocations are reserved
	// from: its initializers and folded constants, the arenas of its runs
	// (planned buffers, kernel scratch, Alloc), its cached plans. A plan
	// whose memory cannot fit is refused before anything is allocated
	// (see budget.go). Nil: no budget beyond MaxTensorBytes.
	Budget *budget.Budget
	// PlanCacheBytes bounds the memory of the cached per-shape plans (their
	// folded constants and bookkeeping); the least recently used plans are
	// evicted past it. 0: DefaultPlanCacheBytes.
	PlanCacheBytes int64
	// KeepFolded keeps, in the types Plan returns, every constant folded
	// for the plan's shapes: a backend that lowers the graph's own nodes
	// (the GPU backend) reads those its nodes take. Without it a plan
	// keeps only the constants its steps read (releaseUnread).
	KeepFolded bool
	// Logf, when set, receives a line for each attention core a plan of
	// the program runs unfused, node by node, and why (MissedAttention),
	// once per Softmax node: the fusion's one fallback that is not an
	// error, and a slow one.
	Logf func(format string, args ...any)
	// Precision is the arithmetic of float32 matrix products (see
	// ops.Precision; "" is fp32). Compile-time constant folding stays fp32.
	Precision ops.Precision
	// StrictDims refuses a run whose inputs bind one dim_param name to two
	// sizes (e.g. decoder and encoder lengths both exported as "S").
	// Without it such a run goes ahead, as in ONNX Runtime (see
	// ValidateInputs).
	StrictDims bool
	// Weights, when set, releases the float32 data of weights every plan
	// reads only packed (weights.go): a backend process holding its own
	// copy of the model sets it; a program sharing the host's tensors must
	// not.
	Weights WeightReleaser
	// ReferencedWeights reads back the initializers the model holds by
	// reference (released before Compile: a host that loads its weights
	// with onnx.Options.ReferenceWeights and hands backends the
	// references). Compile and the session's planning read only their
	// types. One is read back, and stays, where the host reads its values:
	// a plan's build that folds a node on it or whose fusion matchers read
	// it (a mask, a scale), Run (every weight its plan's steps read), and
	// Const. A plan only looked at (Plan, Steps, Fusions) leaves the
	// others in their file (weights.go). Without it, reading one back is
	// an error naming it.
	ReferencedWeights WeightRestorer
}

// Program is a validated, scheduled and type-inferred graph.
type Program struct {
	Model *ir.Model
	// Order is the topological execution order.
	Order []*ir.Node
	// Types holds the inferred (symbolic) type of every tensor by name, with
	// Const set for initializers and tensors folded at compile time.
	Types map[string]ops.Value
	// Schemas binds each node to the op schema it runs with.
	Schemas map[*ir.Node]*ops.Schema
	// Opsets holds each node's domain opset version.
	Opsets map[*ir.Node]int
	// Index maps each node to its position in Order.
	Index map[*ir.Node]int

	opts Options

	mu     sync.Mutex
	plans  planCache
	closed bool
	// missNoted holds the Softmax nodes whose unfused attention Logf has
	// been told about (newMisses).
	missNoted map[*ir.Node]bool
	// arenas are the idle run memories, shared by every plan.
	arenas arenaPool
	// reserved is what Compile reserved from the budget: initializers and
	// constants folded at compile time.
	reserved int64
	// valueInputs are the graph inputs whose values (not only shapes)
	// decide shapes; plans are keyed by their values (see budget.go).
	valueInputs []string
	// memo backs ops.Context.Memo: work kernels derive from the model's
	// constants (packed weights), shared by every plan and run; memoBytes
	// is what it holds of the budget.
	memo      sync.Map
	memoBytes atomic.Int64
	// weightsMu is held for writing while weights are released or
	// restored (weights.go), for reading while a plan is built or run;
	// weightUsers, pinned and releasedBytes are under it.
	weightsMu     sync.RWMutex
	weightUsers   map[*ir.Tensor]bool
	pinned        map[*ir.Tensor]bool
	releasedBytes int64
	// referenced are the initializers released before Compile, by name,
	// until readReferenced reads each back (under weightsMu).
	referenced map[string]*ir.Tensor
}

// memoize is ops.Context.Memo for every step of every plan. What build
// makes (weights packed for the GEMM: as large as the weights) is reserved
// from the memory budget for the program's lifetime; when the budget
// refuses it, the step fails (memoryError).
func (p *Program) memoize(key any, build func() any) any {
	if v, ok := p.memo.Load(key); ok {
		return v
	}
	v := build()
	var n int64
	if s, ok := v.(interface{ Bytes() int64 }); ok {
		n = s.Bytes()
	}
	if !p.opts.Budget.Reserve(n) {
		panic(memoryError{p.opts.Budget.Exceeded("packing weights for the GEMM", n, p.opts.Budget.Left())})
	}
	v, loaded := p.memo.LoadOrStore(key, v)
	if loaded {
		p.opts.Budget.Release(n)
	} else {
		p.memoBytes.Add(n)
	}
	return v
}

// Compile validates m's graph, binds its nodes to op schemas and infers
// symbolic types. Every error names the node and op it concerns.
func Compile(m *ir.Model, opts Options) (*Program, error) {
	if m == nil || m.Graph == nil {
		return nil, errors.New("model has no graph")
	}
	if opts.Threads <= 0 {
		opts.Threads = 1
	}
	if opts.MaxTensorBytes <= 0 {
		opts.MaxTensorBytes = DefaultMaxTensorBytes
	}
	order, err := m.Graph.Schedule()
	if err != nil {
		return nil, err
	}
	p := &Program{
		Model:   m,
		Order:   order,
		Types:   make(map[string]ops.Value),
		Schemas: make(map[*ir.Node]*ops.Schema, len(order)),
		Opsets:  make(map[*ir.Node]int, len(order)),
		Index:   make(map[*ir.Node]int, len(order)),
		opts:    opts,
		plans:   newPlanCache(opts.PlanCacheBytes),
		arenas:  arenaPool{budget: opts.Budget},
	}
	if err := p.reserveInitializers(); err != nil {
		return nil, err
	}
	for _, in := range m.Graph.Inputs {
		if !in.Type.DType.Known() {
			return nil, fmt.Errorf("graph input %q has unsupported element type %v", in.Name, in.Type.DType)
		}
		for _, d := range in.Type.Shape {
			if d.Param == "" && d.Value < -1 {
				return nil, fmt.Errorf("graph input %q has a negative dim in %v", in.Name, in.Type.Shape)
			}
		}
		p.Types[in.Name] = ops.Value{Type: in.Type}
	}
	for name, t := range m.Graph.Initializers {
		p.Types[name] = ops.Value{Type: ops.Known(t.DType, t.Shape), Const: t}
		if t.Released() {
			if p.referenced == nil {
				p.referenced = map[string]*ir.Tensor{}
			}
			p.referenced[name] = t
		}
	}
	var lacking unsupportedOps
	for _, n := range order {
		if n.Domain == ops.DomainAttnrun && !opts.AllowInternalOps {
			return nil, n.Errorf("the %s domain holds attnrun's internal ops, which only its own graph rewrites create; a model cannot use them", ops.DomainAttnrun)
		}
		s, opset, err := bindSchema(m, n)
		if errors.Is(err, ops.ErrUnknownOp) {
			lacking.add(n, err) // every one is named, not only the first
			continue
		}
		if err != nil {
			return nil, err
		}
		p.Schemas[n] = s
		p.Opsets[n] = opset
		p.Index[n] = len(p.Index)
	}
	if err := lacking.err(); err != nil {
		return nil, err
	}
	if err := p.infer(p.Types, p.reserveConst, nil, true, nil); err != nil {
		p.Close()
		return nil, err
	}
	p.valueInputs = p.findValueInputs()
	return p, nil
}

// bindSchema finds the schema a node runs with.
func bindSchema(m *ir.Model, n *ir.Node) (*ops.Schema, int, error) {
	opset, ok := m.OpsetFor(n.Domain)
	if !ok {
		return nil, 0, n.Errorf("domain %q is not imported by the model (opset_import lists %v)", n.Domain, opsetList(m))
	}
	s, err := ops.Lookup(n.Domain, n.OpType, int(opset))
	if err != nil {
		if errors.Is(err, ops.ErrOpset) {
			return nil, 0, n.Errorf("%w", err) // already names the opset
		}
		domain := n.Domain
		if domain == "" {
			domain = "ai.onnx"
		}
		if errors.Is(err, ops.ErrUnknownOp) {
			// Say that attnrun lacks it, not that it is no ONNX op: it may well be one.
			return nil, 0, n.Errorf("%w at opset %s %d: attnrun has no kernel for it (attnrun ops lists the ops it runs)", err, domain, opset)
		}
		return nil, 0, n.Errorf("%w at opset %s %d", err, domain, opset)
	}
	if err := s.CheckArity(n); err != nil {
		return nil, 0, n.Errorf("%w", err)
	}
	return s, int(opset), nil
}

// unsupportedOps gathers a model's nodes whose ops attnrun has no kernel
// for, so that one error names them all instead of the first alone.
type unsupportedOps struct {
	first error          // the first such node's error
	count map[string]int // nodes per op type, in the order first met
	types []string
}

func (u *unsupportedOps) add(n *ir.Node, err error) {
	if u.first == nil {
		u.first, u.count = err, map[string]int{}
	}
	key := n.OpType
	if n.Domain != "" && n.Domain != "ai.onnx" {
		key = n.Domain + ":" + n.OpType
	}
	if u.count[key] == 0 {
		u.types = append(u.types, key)
	}
	u.count[key]++
}

// err is the first node's error, followed by the other ops attnrun lacks
// and how many nodes use each; nil when there were none.
func (u *unsupportedOps) err() error {
	if u.first == nil {
		return nil
	}
	nodes := 0
	for _, c := range u.count {
		nodes += c
	}
	if nodes == 1 {
		return u.first
	}
	parts := make([]string, len(u.types))
	for i, t := range u.types {
		noun := "nodes"
		if u.count[t] == 1 {
			noun = "node"
		}
		parts[i] = fmt.Sprintf("%s (%d %s)", t, u.count[t], noun)
	}
	return fmt.Errorf("%w; in all, %d nodes use ops attnrun lacks: %s", u.first, nodes, strings.Join(parts, ", "))
}

func opsetList(m *ir.Model) []string {
	var out []string
	for d, v := range m.Opsets {
		if d == "" {
			d = "ai.onnx"
		}
		out = append(out, fmt.Sprintf("%s:%d", d, v))
	}
	return out
}

// infer runs shape inference over the whole order, filling types and
// folding what is computable ahead of time. With concrete input shapes in
// types, every shape subgraph folds away. reserve takes a folded result's
// bytes from the memory budget before the fold; a fold it refuses is left
// to run. values reads the constants a fold computes with (see fold).
//
// With checkSizes every output must fit Options.MaxTensorBytes (Compile:
// a model's static shapes); without, a plan checks the outputs of the
// steps it keeps after the rewrites instead (buildPlan), so that a tensor
// the attention fusion never creates — the [B, H, S, S] scores of a long
// sequence — does not refuse the plan.
func (p *Program) infer(types map[string]ops.Value, reserve func(int64) bool, values *valueReader, checkSizes bool, drop func(string)) error {
	// With drop, a folded tensor every reader of which folded too is
	// handed to drop after its last reader: no step will read it.
	var readers map[string]int
	var stepRead map[string]bool
	if drop != nil {
		readers, stepRead = map[string]int{}, map[string]bool{}
		for _, n := range p.Order {
			for i, name := range n.Inputs {
				if name != "" && !slices.Contains(n.Inputs[:i], name) {
					readers[name]++
				}
			}
		}
	}
	for _, n := range p.Order {
		in := make([]ops.Value, len(n.Inputs))
		for i, name := range n.Inputs {
			if name == "" {
				continue
			}
			v, ok := types[name]
			if !ok {
				return n.Errorf("input %q has no inferred type", name)
			}
			in[i] = v
		}
		s := p.Schemas[n]
		if err := s.CheckNarrow(n, in); err != nil {
			return err
		}
		if s.TypeInput >= 0 && s.TypeInput < len(in) && in[s.TypeInput].Present() && !s.TakesDType(in[s.TypeInput].Type.DType) {
			dt := in[s.TypeInput].Type.DType
			if since, ok := s.LaterVersionTaking(dt); ok {
				return n.Errorf("input %d has element type %v, which this op does not take at opset %d (it takes %v; %s-%d takes %v: export the model at opset %d or later)",
					s.TypeInput, dt, p.Opsets[n], s.DTypes, n.OpType, since, dt, since)
			}
			return n.Errorf("input %d has element type %v, which this op does not take (it takes %v)", s.TypeInput, dt, s.DTypes)
		}
		out, err := s.Infer(n, p.Opsets[n], in)
		if err != nil {
			return nodeError(n, err)
		}
		if len(out) < len(n.Outputs) {
			return n.Errorf("internal error: inference gave %d outputs for %d", len(out), len(n.Outputs))
		}
		consts, folded, err := p.fold(n, in, out, reserve, values)
		if err != nil {
			return err
		}
		if folded {
			for i := range out {
				out[i].Const = consts[i]
				out[i].Type = ops.Known(consts[i].DType, consts[i].Shape)
			}
		}
		for i, name := range n.Outputs {
			if name == "" {
				continue
			}
			if checkSizes {
				if err := p.checkSize(n, name, out[i].Type); err != nil {
					return err
				}
			}
			types[name] = out[i]
		}
		if drop != nil {
			for i, name := range n.Inputs {
				if name == "" || slices.Contains(n.Inputs[:i], name) {
					continue
				}
				stepRead[name] = stepRead[name] || !folded
				if readers[name]--; readers[name] == 0 && !stepRead[name] {
					drop(name)
				}
			}
		}
	}
	return nil
}

// checkSize rejects a known tensor size above the memory limit.
func (p *Program) checkSize(n *ir.Node, name string, t ir.TypeInfo) error {
	dims, ok := t.Shape.Concrete()
	if !ok || !t.RankKnown {
		return nil
	}
	elems := ir.NumElements(dims)
	if elems < 0 || (t.DType.Size() > 0 && elems > p.opts.MaxTensorBytes/int64(t.DType.Size())) {
		return n.Errorf("output %q of shape %v would exceed the tensor size limit of %d bytes", name, dims, p.opts.MaxTensorBytes)
	}
	return nil
}

// fold computes a node's outputs ahead of time when they depend only on
// constants, or when inference already knows them as concrete shape values
// (Shape of a tensor whose shape is known, and what is computed from it).
// It reads the constants' data through values: a weight held by reference
// is read back only for a node that folds, and only where values may
// (a plan's build); where it may not (Compile), the node is left to run.
func (p *Program) fold(n *ir.Node, in, out []ops.Value, reserve func(int64) bool, values *valueReader) ([]*ir.Tensor, bool, error) {
	if consts, ok := constsFromSym(out[:len(n.Outputs)]); ok {
		return consts, true, nil // a few int64s: not worth accounting
	}
	if n.Domain != "" {
		return nil, false, nil
	}
	for _, v := range in {
		if !v.Present() {
			continue
		}
		if v.Const == nil {
			return nil, false, nil
		}
		size := int64(v.Const.Len())
		if v.Const.Released() { // no data to count: its shape says
			size = ir.NumElements(v.Const.Shape)
		}
		if size > maxFoldElements {
			return nil, false, nil
		}
	}
	// Fold only when inference says how big every result is, and it is
	// small: folding must never be the way a hostile model allocates.
	var bytes int64
	for _, o := range out[:len(n.Outputs)] {
		dims, ok := o.Type.Shape.Concrete()
		if !o.Type.RankKnown || !ok {
			return nil, false, nil
		}
		e := ir.NumElements(dims)
		if e < 0 || e > maxFoldElements {
			return nil, false, nil
		}
		bytes += e * int64(max(o.Type.DType.Size(), 1))
	}
	args := make([]*ir.Tensor, len(in))
	for i, v := range in {
		if !v.Present() {
			continue
		}
		if args[i] = values.value(n.Inputs[i], v.Const); args[i] == nil {
			return nil, false, values.failed() // no data: the node runs, and its step reads the weight
		}
	}
	if !reserve(bytes) {
		return nil, false, nil // over the budget: the node runs instead, and the plan's check sees it
	}
	res, err := runKernel(p.Schemas[n], &ops.Context{Opset: p.Opsets[n], Threads: max(1, p.opts.Threads)}, n, args)
	if err != nil {
		return nil, false, err // the caller fails, releasing what was reserved
	}
	return res, true, nil
}

// constsFromSym turns outputs whose symbolic contents are fully known into
// int64 constants.
func constsFromSym(out []ops.Value) ([]*ir.Tensor, bool) {
	if len(out) == 0 {
		return nil, false
	}
	res := make([]*ir.Tensor, len(out))
	for i, o := range out {
		if o.Sym == nil || o.Type.DType != ir.Int64 || !o.Type.RankKnown || len(o.Type.Shape) > 1 {
			return nil, false
		}
		vals, ok := o.Sym.Concrete()
		if !ok {
			return nil, false
		}
		var shape []int
		if len(o.Type.Shape) == 1 {
			shape = []int{len(vals)}
		} else if len(vals) != 1 {
			return nil, false
		}
		data := make([]int64, len(vals))
		for k, v := range vals {
			data[k] = int64(v)
		}
		res[i] = &ir.Tensor{DType: ir.Int64, Shape: shape, Data: data}
	}
	return res, true
}

// runKernel calls a kernel, turning a panic into an error naming the node,
// and checks the number of results.
func runKernel(s *ops.Schema, ctx *ops.Context, n *ir.Node, args []*ir.Tensor) (res []*ir.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = kernelPanic(s, n, r)
		}
	}()
	res, err = s.Run(ctx, n, args)
	if err != nil {
		return nil, nodeError(n, err)
	}
	if len(res) < len(n.Outputs) {
		return nil, n.Errorf("internal error: kernel returned %d outputs for %d", len(res), len(n.Outputs))
	}
	return res, nil
}

// kernelPanic turns what a kernel panicked with into its node's error: an
// allocation the memory budget refused (memoryError), or an internal error.
func kernelPanic(s *ops.Schema, n *ir.Node, r any) error {
	if me, ok := r.(memoryError); ok {
		return n.Errorf("%w", me.err)
	}
	return n.Errorf("internal error in the %s kernel: %v", s.Key(), r)
}

// nodeError wraps err with the node's name and op unless it already names them.
func nodeError(n *ir.Node, err error) error {
	if strings.HasPrefix(err.Error(), fmt.Sprintf("node %q", n.Label())) {
		return err
	}
	return n.Errorf("%w", err)
}
