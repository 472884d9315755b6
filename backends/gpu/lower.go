package gpu

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/graph"
)

// Lowering a compiled plan to device calls: the plan, the lowerer's
// bookkeeping (values, slots, constants) and the per-op dispatch
// (lowerNode); the ops' lowerings are in lower_elementwise.go,
// lower_movement.go, lower_norm.go, lower_matmul.go and lower_attention.go.

// errFlagVal names the per-partition device word that kernels set on a
// runtime error (Gather index out of range).
const errFlagVal = "#err"

// call is one device operation of a plan: a kernel launch or a cuBLAS call.
type call struct {
	step int      // the node's index in Program.Order (status page)
	node *ir.Node // for error messages
	k    *launch
	g    *gemmCall
}

// plan is a partition's device program for one set of input shapes: the
// calls in order, where every value lives (the weights region uploaded at
// Compile, this plan's constants region, or an offset in the partition's
// arena), and what crosses the partition boundary.
type plan struct {
	calls []call
	// alias maps a metadata-only op's output to the value whose buffer it
	// shares (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Dropout, Cast
	// to the same type).
	alias map[string]string
	// arena offsets of buffers (root values) and the arena's size.
	bufOff     map[string]int64
	arenaBytes int64
	// Constants of this plan not in the weights region (folded per shape).
	constOff   map[string]int64
	constData  map[string]*ir.Tensor
	constOrder []string
	constBytes int64
	// inputs are the partition inputs to upload (each a buffer root).
	inputs []string
	// outputs are the partition's graph outputs in order; hostOut holds
	// those known on the host (constants), the rest are downloaded.
	outputs []string
	hostOut map[string]*ir.Tensor
	types   map[string]ops.Value
	usesErr bool
}

// root follows aliases to the value owning the buffer.
func (p *plan) root(v string) string {
	for k := 0; k < 64; k++ {
		a, ok := p.alias[v]
		if !ok {
			return v
		}
		v = a
	}
	return v
}

// dataInputs lists which inputs of an op are read as tensor data (the rest
// are shape parameters, read on the host from folded constants).
func dataInputs(n *ir.Node) []int {
	switch n.OpType {
	case "Reshape", "Slice", "Split", "Expand", "Tile", "Squeeze", "Unsqueeze", "Dropout", "Flatten", "Identity", "Trilu":
		return []int{0}
	case "Shape", "ConstantOfShape", "Constant", "Range":
		return nil
	}
	out := make([]int, len(n.Inputs))
	for i := range out {
		out[i] = i
	}
	return out
}

// staticConsts lists the constants of a compiled program that device steps
// read as data: initializers and tensors folded at compile time consumed by
// a node that does not fold away. They are uploaded once, at Compile.
func staticConsts(prog *graph.Program) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range prog.Order {
		if allConst(n, prog.Types) {
			continue
		}
		for _, i := range dataInputs(n) {
			name := n.Input(i)
			if name == "" || seen[name] || prog.Types[name].Const == nil {
				continue
			}
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// allConst reports whether every output of n is a known constant.
func allConst(n *ir.Node, types map[string]ops.Value) bool {
	for _, o := range n.Outputs {
		if o != "" && types[o].Const == nil {
			return false
		}
	}
	return true
}

// lowerer builds a plan.
type lowerer struct {
	prog   *graph.Program
	types  map[string]ops.Value
	static map[string]bool // values in the weights region
	pl     *plan
	cur    int            // sequence number of the node being lowered
	first  map[string]int // buffer root → first step writing it (-1: input)
	last   map[string]int // buffer root → last step reading it
	bytes  map[string]int64
	node   *ir.Node
	step   int
}

// lowerPlan builds the device plan of prog for inputs (already validated
// by the caller through prog.Plan). static names the values uploaded at
// Compile.
func lowerPlan(prog *graph.Program, inputs map[string]*ir.Tensor, static map[string]bool) (*plan, error) {
	types, err := prog.Plan(inputs)
	if err != nil {
		return nil, err
	}
	fusions, err := prog.Fusions(inputs)
	if err != nil {
		return nil, err
	}
	// The program's cached types are shared: work on a copy, since
	// lowering adds host-made constants.
	own := make(map[string]ops.Value, len(types)+4)
	for k, v := range types {
		own[k] = v
	}
	types = own
	l := &lowerer{
		prog: prog, types: types, static: static,
		pl:    &plan{alias: map[string]string{}, constData: map[string]*ir.Tensor{}, hostOut: map[string]*ir.Tensor{}, types: types},
		first: map[string]int{}, last: map[string]int{}, bytes: map[string]int64{},
	}
	for _, vi := range prog.Model.Graph.Inputs {
		l.first[vi.Name] = -1
		b, err := l.valueBytes(vi.Name)
		if err != nil {
			return nil, err
		}
		l.bytes[vi.Name] = b
	}
	// Fused attention replaces its chain at the position of the chain's last
	// MatMul; the movement nodes it reads or writes through views
	// (Absorbed) do not run either. When the kernel cannot take a fused
	// node's head sizes, the original nodes run instead. An ONNX Attention
	// node runs the nodes of its lowering (Fusion.Nodes) in its place; it
	// has no unfused form here.
	fusedAt := map[*ir.Node]graph.Fusion{}
	skip := map[*ir.Node]bool{}
	for _, f := range fusions {
		if len(f.Replaced) == 0 {
			continue
		}
		if !attnLowerable(f.Node, types) {
			if isAttentionOp(f.Replaced[0]) {
				return nil, headSizeError(f.Replaced[0], f.Node, types)
			}
			continue
		}
		last := f.Replaced[0]
		for _, r := range f.Replaced {
			skip[r] = true
			if prog.Index[r] > prog.Index[last] {
				last = r
			}
		}
		for _, a := range f.Absorbed {
			skip[a] = true
		}
		fusedAt[last] = f
	}
	// A node runs only when a later step or a graph output reads one of its
	// results: one read only by nodes folded on the host (a Transpose
	// feeding a Shape) is dead, and may read a value a fusion absorbed.
	// A fused node runs as the fusion's node, or its Nodes (an Attention
	// node's lowering).
	runs := func(n *ir.Node) ([]*ir.Node, []int) {
		if f, ok := fusedAt[n]; ok {
			if len(f.Nodes) > 0 {
				return f.Nodes, f.Opsets
			}
			return []*ir.Node{f.Node}, []int{1}
		}
		return []*ir.Node{n}, []int{prog.Opsets[n]}
	}
	live := map[string]bool{}
	for _, vi := range prog.Model.Graph.Outputs {
		live[vi.Name] = true
	}
	needed := map[*ir.Node]bool{}
	for i := len(prog.Order) - 1; i >= 0; i-- {
		n := prog.Order[i]
		if _, ok := fusedAt[n]; !ok && (skip[n] || allConst(n, types)) {
			continue
		}
		nodes, _ := runs(n)
		read := false
		for _, node := range nodes {
			read = read || slices.ContainsFunc(node.Outputs, func(o string) bool { return o != "" && live[o] })
		}
		if !read {
			continue
		}
		needed[n] = true
		for _, node := range nodes {
			for _, in := range node.Inputs {
				live[in] = true
			}
		}
	}
	seq := 0
	for _, n := range prog.Order {
		if !needed[n] {
			continue
		}
		nodes, opsets := runs(n)
		if _, fused := fusedAt[n]; !fused && isAttentionOp(n) {
			// Not rewritten (--no-fuse): lower its lowering here, as the
			// CPU's Attention kernel runs it.
			var err error
			if nodes, opsets, err = lowerAttentionOp(n, types); err != nil {
				return nil, err
			}
		}
		for k, node := range nodes {
			l.cur, l.node, l.step = seq, node, prog.Index[n]
			if err := l.lowerNode(node, opsets[k]); err != nil {
				return nil, err
			}
			seq++
		}
	}
	return l.finish(seq)
}

// lowerAttentionOp returns the nodes an Attention node the plan did not
// rewrite runs as (ops.LowerAttention), adding the types of the tensors
// they make to types.
func lowerAttentionOp(n *ir.Node, types map[string]ops.Value) ([]*ir.Node, []int, error) {
	in := make([]ops.Value, len(n.Inputs))
	for k, name := range n.Inputs {
		if name != "" {
			in[k] = types[name]
		}
	}
	low, err := ops.LowerAttention(n, in)
	if err != nil {
		return nil, nil, err
	}
	local, err := low.Types(func(name string) (ops.Value, bool) {
		v, ok := types[name]
		return v, ok
	})
	if err != nil {
		return nil, nil, n.Errorf("%w", err)
	}
	for name, v := range local {
		types[name] = v
	}
	if !attnLowerable(low.Fused, types) {
		return nil, nil, headSizeError(n, low.Fused, types)
	}
	opsets := make([]int, len(low.Nodes))
	for i, node := range low.Nodes {
		opsets[i] = low.Opsets[node]
	}
	return low.Nodes, opsets, nil
}

// headSizeError is the error for Attention node n whose FusedAttention
// node fused has head sizes the kernel does not take.
func headSizeError(n, fused *ir.Node, types map[string]ops.Value) error {
	g, _ := attnGeometry(fused, types)
	return n.Errorf("the gpu attention kernel takes head sizes up to %d, this node has %d (Q, K) and %d (V): run it on the cpu backend", attnMaxD, g.d, g.dv)
}

// isAttentionOp reports whether n is an ONNX Attention node.
func isAttentionOp(n *ir.Node) bool {
	return n.OpType == "Attention" && (n.Domain == "" || n.Domain == "ai.onnx")
}

// finish plans the arena and the boundary transfers; end is the number of
// lowered nodes.
func (l *lowerer) finish(end int) (*plan, error) {
	pl := l.pl
	for _, vi := range l.prog.Model.Graph.Outputs {
		name := vi.Name
		pl.outputs = append(pl.outputs, name)
		if c := l.types[name].Const; c != nil {
			pl.hostOut[name] = c
			continue
		}
		r := pl.root(name)
		if c := l.types[r].Const; c != nil {
			// An alias of a constant: the host has the data.
			shape, err := l.shape(name)
			if err != nil {
				return nil, err
			}
			pl.hostOut[name] = &ir.Tensor{DType: c.DType, Shape: shape, Data: c.Data}
			continue
		}
		if _, ok := l.first[r]; !ok {
			return nil, fmt.Errorf("graph output %q is not computed by any device step", name)
		}
		l.last[r] = end
	}
	var bufs []interval
	for r, f := range l.first {
		last, used := l.last[r]
		if f == -1 && !used {
			continue // an input no device step reads
		}
		if !used || last < f {
			last = f
		}
		bufs = append(bufs, interval{name: r, bytes: l.bytes[r], first: f, last: last})
		if f == -1 {
			pl.inputs = append(pl.inputs, r)
		}
	}
	sort.Slice(bufs, func(i, j int) bool { return bufs[i].name < bufs[j].name })
	sort.Strings(pl.inputs)
	var err error
	if pl.bufOff, pl.arenaBytes, err = planArena(bufs); err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, n := range pl.constOrder {
		sizes[n] = pl.constData[n].Bytes()
	}
	pl.constOff, pl.constBytes = packRegion(pl.constOrder, sizes)
	return pl, nil
}

// ---- value helpers ----

// axisAttr reads node n's axis attribute (def when absent) and normalizes
// it against rank, errors naming the node.
func axisAttr(n *ir.Node, def int64, rank int) (int, error) {
	a, err := n.AttrInt("axis", def)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	axis, err := ops.NormAxis(a, rank)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return axis, nil
}

func (l *lowerer) shape(name string) ([]int, error) {
	v, ok := l.types[name]
	if !ok {
		return nil, l.node.Errorf("value %q has no inferred type", name)
	}
	dims, ok := v.Type.Shape.Concrete()
	if !ok || !v.Type.RankKnown {
		return nil, l.node.Errorf("value %q has no concrete shape (%v)", name, v.Type.Shape)
	}
	return dims, nil
}

func (l *lowerer) dtype(name string) ir.DType { return l.types[name].Type.DType }

func (l *lowerer) valueBytes(name string) (int64, error) {
	v := l.types[name]
	dims, ok := v.Type.Shape.Concrete()
	if !ok || !v.Type.RankKnown {
		return 0, fmt.Errorf("value %q has no concrete shape", name)
	}
	sz := v.Type.DType.Size()
	if sz <= 0 || v.Type.DType == ir.String || v.Type.DType == ir.Float16 || v.Type.DType == ir.BFloat16 {
		return 0, fmt.Errorf("value %q has element type %v, which the gpu backend does not keep on the device", name, v.Type.DType)
	}
	n := ir.NumElements(dims)
	if n < 0 || n > math.MaxInt64/int64(sz) {
		return 0, fmt.Errorf("value %q of shape %v is too large", name, dims)
	}
	return n * int64(sz), nil
}

// in returns the value node input i is read from, recording the read.
func (l *lowerer) in(n *ir.Node, i int) (string, error) {
	name := n.Input(i)
	if name == "" {
		return "", n.Errorf("input %d is missing", i)
	}
	return l.read(name)
}

// read records a read of a value and returns its name.
func (l *lowerer) read(name string) (string, error) {
	if c := l.types[name].Const; c != nil {
		if !l.static[name] {
			if _, ok := l.pl.constData[name]; !ok {
				if _, err := l.valueBytes(name); err != nil {
					return "", l.node.Errorf("%w", err)
				}
				l.pl.constData[name] = c
				l.pl.constOrder = append(l.pl.constOrder, name)
			}
		}
		return name, nil
	}
	r := l.pl.root(name)
	if l.types[r].Const != nil {
		return name, nil
	}
	if _, ok := l.first[r]; !ok {
		return "", l.node.Errorf("input %q is not on the device (produced by no earlier device step)", name)
	}
	l.last[r] = max(l.last[r], l.cur)
	return name, nil
}

// hostConst adds a constant made on the host for this plan (e.g. a Pow
// exponent converted to float32) and returns its value name.
func (l *lowerer) hostConst(name string, t *ir.Tensor) string {
	if _, ok := l.pl.constData[name]; !ok {
		l.pl.constData[name] = t
		l.pl.constOrder = append(l.pl.constOrder, name)
		l.types[name] = ops.Value{Type: ops.Known(t.DType, t.Shape), Const: t}
	}
	return name
}

// out returns the value output i is written to, allocating its buffer. An
// output that is a known constant (the node runs for another output) is
// written to a scratch buffer.
func (l *lowerer) out(n *ir.Node, i int) (string, error) {
	name := n.Outputs[i]
	if name == "" {
		return "", nil
	}
	v := l.types[name]
	b, err := l.valueBytes(name)
	if err != nil {
		return "", n.Errorf("%w", err)
	}
	if v.Const != nil {
		name = "#dead:" + name
	}
	if _, dup := l.first[name]; dup {
		return "", n.Errorf("output %q is written twice", name)
	}
	l.first[name], l.bytes[name] = l.cur, b
	return name, nil
}

// aliasOut makes output 0 share input 0's buffer.
func (l *lowerer) aliasOut(n *ir.Node) error {
	src, err := l.in(n, 0)
	if err != nil {
		return err
	}
	dst := n.Outputs[0]
	if dst == "" || l.types[dst].Const != nil {
		return nil
	}
	l.pl.alias[dst] = src
	return nil
}

func (l *lowerer) emit(k *launch) {
	l.pl.calls = append(l.pl.calls, call{step: l.step, node: l.node, k: k})
}

func (l *lowerer) emitGemm(g gemmCall) {
	l.pl.calls = append(l.pl.calls, call{step: l.step, node: l.node, g: &g})
}

// kernel wraps a parameter struct into a grid-stride launch over n items.
func kernel(name, params string, n int64, pb *paramBuilder) *launch {
	g, b := grid1D(n)
	return &launch{kernel: name, params: params, grid: g, block: b, fields: pb.fields}
}

// stridedOK checks a coalesced rank against the kernels' limit.
func (l *lowerer) stridedOK(shape []int) error {
	if len(shape) > maxRank {
		return l.node.Errorf("needs a strided kernel over %d dims, the gpu kernels take at most %d", len(shape), maxRank)
	}
	return nil
}

// ---- per-op lowering ----

var binOps = map[string]int64{
	"Add": binAdd, "Sub": binSub, "Mul": binMul, "Div": binDiv, "Pow": binPow,
	"And": binAnd, "Or": binOr, "Xor": binXor,
	"Equal": binEq, "Less": binLt, "Greater": binGt, "LessOrEqual": binLe, "GreaterOrEqual": binGe,
}

var unOps = map[string]int64{
	"Sqrt": unSqrt, "Erf": unErf, "Neg": unNeg, "Exp": unExp, "Tanh": unTanh, "Relu": unRelu,
	"Abs": unAbs, "Reciprocal": unRecip, "Sigmoid": unSigmoid, "Log": unLog, "Not": unNot,
}

func (l *lowerer) lowerNode(n *ir.Node, opset int) error {
	if n.Domain == ops.DomainAttnrun && n.OpType == ops.FusedAttentionOp {
		return l.attention(n)
	}
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return n.Errorf("the gpu backend has no kernel for this op")
	}
	if op, ok := binOps[n.OpType]; ok {
		return l.binary(n, op)
	}
	if op, ok := unOps[n.OpType]; ok {
		return l.unary(n, op)
	}
	switch n.OpType {
	case "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity":
		return l.aliasOut(n)
	case "Dropout":
		return l.dropout(n)
	case "Cast":
		return l.cast(n)
	case "Where":
		return l.where(n)
	case "Transpose":
		return l.transpose(n)
	case "Expand":
		return l.expand(n)
	case "Slice":
		return l.slice(n, opset)
	case "Concat":
		return l.concat(n)
	case "Split":
		return l.split(n)
	case "Tile":
		return l.tile(n)
	case "Gather":
		return l.gather(n)
	case "Pad":
		return l.pad(n)
	case "ConstantOfShape":
		return l.constantOfShape(n)
	case "Softmax":
		return l.softmax(n, opset)
	case "LayerNormalization":
		return l.layerNorm(n)
	case "RMSNormalization":
		return l.rmsNorm(n)
	case "RotaryEmbedding":
		return l.rotary(n)
	case "MatMul":
		return l.matmul(n)
	case "Gemm":
		return l.gemm(n)
	case "Trilu":
		return l.trilu(n)
	}
	return n.Errorf("the gpu backend has no kernel for this op (or it should have been folded on the host)")
}

// attnScoresModes maps FusedAttention's scores_mode to attention_f32's.
var attnScoresModes = map[string]int{
	ops.ScoresRaw: scoresRaw, ops.ScoresSoftcapped: scoresSoftcapped, ops.ScoresBiased: scoresBiased, ops.ScoresWeights: scoresWeights,
}
