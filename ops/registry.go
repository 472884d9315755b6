// Package ops holds attnrun's op semantics: for each ONNX op and opset range,
// how to infer output types and shapes, and a reference CPU kernel. Each op
// family lives in its own file and registers its Schemas in init; the
// registry, not a switch, is how the rest of attnrun finds an op.
package ops

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/attnrun/attnrun/ir"
)

// MinOpset and MaxOpset bound the default-domain opsets attnrun supports
// (ONNX 1.22's latest is 27).
const (
	MinOpset = 1
	MaxOpset = 27
)

// versions returns the opset ranges of an op whose ONNX versions (the opsets
// at which ONNX defined or changed it, from the first one attnrun covers)
// are since, the last range ending at MaxOpset: versions(5, 13, 14) is
// [5, 12], [13, 13], [14, MaxOpset]. Op families register one schema per
// range, so that `attnrun ops` lists every version; TestRegistryFollowsONNX
// checks the lists against ONNX's.
func versions(since ...int) [][2]int {
	out := make([][2]int, len(since))
	for i, s := range since {
		out[i] = [2]int{s, MaxOpset}
		if i+1 < len(since) {
			out[i][1] = since[i+1] - 1
		}
	}
	return out
}

// Domain names.
const (
	// DomainONNX is the default ai.onnx domain, spelled "" in models.
	DomainONNX = ""
	// DomainAttnrun holds attnrun's own ops (fused kernels made by graph rewrites).
	DomainAttnrun = "com.attnrun"
)

// Errors returned (wrapped) by Lookup.
var (
	ErrUnknownOp     = errors.New("unsupported op")
	ErrUnknownDomain = errors.New("unknown op domain")
	ErrOpset         = errors.New("unsupported opset version")
)

// Value is what shape inference knows about one tensor: its type and shape,
// and, when known before running, its contents. Const is set for
// initializers, Constant outputs and folded subgraphs. Sym is set for small
// 1-D integer tensors whose elements are known symbolically, such as the
// output of Shape on a tensor of shape [batch, seq, 64]; ops that move shape
// values around (Gather, Concat, Unsqueeze, Slice, Cast) propagate it.
type Value struct {
	Type  ir.TypeInfo
	Const *ir.Tensor
	Sym   ir.Shape
}

// Present reports whether the optional input was given (its name non-empty).
func (v Value) Present() bool { return v.Type.DType != ir.Undefined }

// InferFunc checks a node's attributes and input types and returns its
// outputs' types. in has one entry per node input; an omitted optional input
// has Type.DType == ir.Undefined. It must not fail merely because a dim is
// unknown: unknown in, unknown out.
type InferFunc func(n *ir.Node, opset int, in []Value) ([]Value, error)

// RunFunc is the reference CPU kernel. in has one entry per node input (nil
// for an omitted optional input). It returns one tensor per node output.
type RunFunc func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error)

// RunIntoFunc is the optional output-into form of a kernel, for executors
// with a memory plan (runtime/graph reuses intermediate buffers across the
// steps of a run and across runs). out has one entry per node output (nil
// for an omitted output), each preallocated with the dtype and concrete
// shape inference gave and a Data slice of exactly that many elements,
// whose contents are undefined (not necessarily zero). The kernel must
// write every element of each output, must not keep in or out after it
// returns, and must validate its inputs as Run does. An output shares
// memory with an input only where Schema.InPlace allows it.
type RunIntoFunc func(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error

// Context carries what a kernel may need beyond its inputs.
type Context struct {
	// Opset is the version of the node's domain the model imports.
	Opset int
	// Threads is the number of compute threads the kernel may use (≥ 1).
	Threads int
	// Scratch, when set, returns n float32s of working memory (contents
	// undefined) that stay the kernel's until it returns; successive calls
	// during one kernel call return disjoint memory. Executors back it with
	// memory reused across runs, which matters where the first touch of
	// fresh memory is expensive (a page fault costs ~10 µs on some VMs).
	// Kernels allocate when it is nil.
	Scratch func(n int) []float32
	// Alloc, when set, returns a zeroed tensor of type dt and shape for
	// the kernel's outputs (and temporaries). Executors back it with
	// memory reused across runs, so that a kernel without RunInto (bool
	// masks, int64 indices) does not fault in fresh memory every run.
	// Kernels allocate through newOutput, which allocates when Alloc is nil.
	Alloc func(dt ir.DType, shape []int) *ir.Tensor
	// Constant reports, per input, whether it is a constant of the model
	// (an initializer, or computed from initializers at compile time): the
	// same tensor with the same contents in every run. Nil when unknown.
	Constant []bool
	// Memo, when set, returns what build makes for key, calling build
	// once and keeping the result for the executor's lifetime (shared by
	// its runs and plans). Kernels cache work on constant inputs there,
	// keyed by the input's memory, such as weights packed for the GEMM.
	Memo func(key any, build func() any) any
	// Precision is the arithmetic of float32 matrix products ("" is
	// PrecisionFP32).
	Precision Precision
}

// memoOf returns build's result through ctx.Memo when input i is a
// constant of the model and the executor memoizes, else nil: the kernel
// then does the work itself.
func (ctx *Context) memoOf(i int, key any, build func() any) any {
	if !ctx.memoizes(i) {
		return nil
	}
	return ctx.Memo(key, build)
}

// memoizes reports whether input i is a constant of the model and the
// executor memoizes work on it.
func (ctx *Context) memoizes(i int) bool {
	return ctx != nil && ctx.Memo != nil && i < len(ctx.Constant) && ctx.Constant[i]
}

// EffectiveOpset returns the context's opset, or MaxOpset when ctx is nil or sets
// none (a kernel called directly, as in tests).
func (ctx *Context) EffectiveOpset() int {
	if ctx != nil && ctx.Opset > 0 {
		return ctx.Opset
	}
	return MaxOpset
}

// ScratchFloats returns n float32s of working memory from ctx.Scratch, or
// newly allocated ones when ctx has no scratch.
func (ctx *Context) ScratchFloats(n int) []float32 {
	if ctx != nil && ctx.Scratch != nil {
		if s := ctx.Scratch(n); len(s) == n {
			return s
		}
	}
	return make([]float32, n)
}

// Schema describes one op over a range of opset versions.
type Schema struct {
	Domain string // DomainONNX or DomainAttnrun
	OpType string
	// Since and Until bound the opset versions covered, inclusive.
	Since, Until int
	// MinInputs and MaxInputs bound the number of node inputs.
	MinInputs, MaxInputs int
	// TypeInput is the index of the input whose element type must be one of
	// DTypes; -1 when the op takes any type.
	TypeInput int
	// DTypes lists the element types the kernel takes at TypeInput.
	DTypes []ir.DType
	// NarrowInputs lists the inputs besides TypeInput that may hold a
	// narrow element type (float8, int4, float4, int2: ir.DType.Narrow),
	// which Infer then checks. A narrow type at TypeInput must be in
	// DTypes; at any other input it refuses the node at compile time.
	NarrowInputs []int
	// Infer computes output types; Run computes output values.
	Infer InferFunc
	Run   RunFunc
	// RunInto, when set, computes the same outputs as Run into buffers the
	// caller provides (see RunIntoFunc). Run stays the reference.
	RunInto RunIntoFunc
	// InPlace lists the inputs whose buffer RunInto may also be given as
	// output 0 when that input has output 0's dtype and shape (an
	// elementwise kernel reads element i of such an input before writing
	// element i of the output, and never reads it afterwards).
	InPlace []int
	// Doc is a one-line description for `attnrun ops`.
	Doc string
	// Notes lists how attnrun reads the op where its specification leaves
	// room (choices, deviations, limits); docs/ops.md shows them.
	Notes []string
}

// Key names the schema: "Add", "com.attnrun:FusedAttention".
func (s *Schema) Key() string {
	if s.Domain == "" {
		return s.OpType
	}
	return s.Domain + ":" + s.OpType
}

// TakesDType reports whether the kernel accepts dt at TypeInput.
func (s *Schema) TakesDType(dt ir.DType) bool {
	if s.TypeInput < 0 {
		return true
	}
	for _, d := range s.DTypes {
		if d == dt {
			return true
		}
	}
	return false
}

type registry struct {
	byKey map[string][]*Schema
}

var reg = registry{byKey: map[string][]*Schema{}}

// Register adds a schema. It panics (at init time) on a malformed schema or
// an opset range overlapping one already registered for the same op.
func Register(s *Schema) {
	if s.OpType == "" || s.Since <= 0 || s.Until < s.Since || s.Infer == nil || s.Run == nil {
		panic(fmt.Sprintf("ops.Register: malformed schema %+v", s))
	}
	for _, o := range reg.byKey[s.Key()] {
		if s.Since <= o.Until && o.Since <= s.Until {
			panic(fmt.Sprintf("ops.Register: %s opsets %d-%d overlap %d-%d", s.Key(), s.Since, s.Until, o.Since, o.Until))
		}
	}
	reg.byKey[s.Key()] = append(reg.byKey[s.Key()], s)
}

// Lookup finds the schema for an op at the opset version its domain is
// imported with.
func Lookup(domain, opType string, opset int) (*Schema, error) {
	if domain == "ai.onnx" {
		domain = ""
	}
	if domain != DomainONNX && domain != DomainAttnrun {
		return nil, fmt.Errorf("%w %q (op %s)", ErrUnknownDomain, domain, opType)
	}
	key := opType
	if domain != "" {
		key = domain + ":" + opType
	}
	list := reg.byKey[key]
	if len(list) == 0 {
		return nil, fmt.Errorf("%w %s", ErrUnknownOp, key)
	}
	for _, s := range list {
		if opset >= s.Since && opset <= s.Until {
			return s, nil
		}
	}
	lo, hi := list[0].Since, list[0].Until
	for _, s := range list {
		lo, hi = min(lo, s.Since), max(hi, s.Until)
	}
	return nil, fmt.Errorf("%w: %s at opset %d (attnrun covers opsets %d to %d)", ErrOpset, key, opset, lo, hi)
}

// Schemas returns every registered schema sorted by key and opset.
func Schemas() []*Schema {
	var all []*Schema
	for _, l := range reg.byKey {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Key() != all[j].Key() {
			return all[i].Key() < all[j].Key()
		}
		return all[i].Since < all[j].Since
	})
	return all
}

// CheckArity verifies a node's input count against the schema.
func (s *Schema) CheckArity(n *ir.Node) error {
	k := len(n.Inputs)
	if k < s.MinInputs || (s.MaxInputs >= 0 && k > s.MaxInputs) {
		if s.MinInputs == s.MaxInputs {
			return fmt.Errorf("takes %d inputs, got %d", s.MinInputs, k)
		}
		return fmt.Errorf("takes %d to %d inputs, got %d", s.MinInputs, s.MaxInputs, k)
	}
	return nil
}

// registered returns every registered schema of an op (all opset ranges),
// for op families that attach optional forms such as RunInto after
// registering.
func registered(domain, opType string) []*Schema {
	key := opType
	if domain != "" {
		key = domain + ":" + opType
	}
	return reg.byKey[key]
}

// CheckNarrow refuses a node that would compute with a narrow element type
// (float8, int4, float4, int2: ir.DType.Narrow) that its kernel does not
// take: at TypeInput one not in DTypes, at any other input one not listed in
// NarrowInputs. The error is one line naming the node, the op, the type and
// the input, and says when a later version of the op takes the type.
func (s *Schema) CheckNarrow(n *ir.Node, in []Value) error {
	for i, v := range in {
		dt := v.Type.DType
		if !dt.Narrow() {
			continue
		}
		if i == s.TypeInput && s.TakesDType(dt) || i != s.TypeInput && slices.Contains(s.NarrowInputs, i) {
			continue
		}
		if i == s.TypeInput {
			for _, later := range registered(s.Domain, s.OpType) {
				if later.Since > s.Since && later.TakesDType(dt) {
					return n.Errorf("input %d has element type %v, which %s takes only from opset %d on (this node runs %s-%d)",
						i, dt, s.OpType, later.Since, s.OpType, s.Since)
				}
			}
		}
		return n.Errorf("input %d has element type %v, which attnrun does not compute with: it converts the narrow types "+
			"(float8, int4, float4, int2) in Cast, CastLike, QuantizeLinear and DequantizeLinear and moves them in shape ops, not in %s", i, dt, s.OpType)
	}
	return nil
}

// LaterVersionTaking returns the first opset after s's range from which
// the same op takes element type dt (Min takes int64 from Min-12, Pad bool
// from Pad-13), and false when no later version registered takes it. It
// names the fix for exporters that emit an op on a type its version at the
// model's opset does not allow (torch.onnx at opset 11 does both).
func (s *Schema) LaterVersionTaking(dt ir.DType) (int, bool) {
	first, ok := 0, false
	for _, o := range reg.byKey[s.Key()] {
		if o.Since > s.Until && o.TakesDType(dt) && (!ok || o.Since < first) {
			first, ok = o.Since, true
		}
	}
	return first, ok
}
