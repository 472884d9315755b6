package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/graph"
)

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

func (l *lowerer) binary(n *ir.Node, op int64) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	dt := l.dtype(a)
	if n.OpType == "Pow" {
		if e := n.Input(1); l.dtype(e) != ir.Float {
			c := l.types[e].Const
			if c == nil {
				return n.Errorf("Pow with a %v exponent computed at run time is not supported on the gpu backend", l.dtype(e))
			}
			f, err := ops.CastTensor(c, ir.Float)
			if err != nil {
				return n.Errorf("converting the exponent: %w", err)
			}
			l.hostConst("#pow-exp:"+e, f)
			n = &ir.Node{Name: n.Name, OpType: n.OpType, Inputs: []string{n.Inputs[0], "#pow-exp:" + e}, Outputs: n.Outputs}
		}
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	oShape, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	sa, err := ops.BroadcastStrides(oShape, as)
	if err != nil {
		return n.Errorf("%w", err)
	}
	sb, err := ops.BroadcastStrides(oShape, bs)
	if err != nil {
		return n.Errorf("%w", err)
	}
	var kname string
	switch dt {
	case ir.Float:
		kname = "binary_f32"
	case ir.Int64:
		kname = "binary_i64"
	case ir.Int32:
		kname = "binary_i32"
	case ir.Bool:
		kname = "binary_u8"
		if op != binAdd && op != binAnd && op != binOr && op != binXor && op != binEq {
			return n.Errorf("%s on bool is not supported on the gpu backend", n.OpType)
		}
	default:
		return n.Errorf("%s on %v is not supported on the gpu backend", n.OpType, dt)
	}
	if op == binPow && dt != ir.Float {
		return n.Errorf("Pow on %v is not supported on the gpu backend", dt)
	}
	if l.dtype(b) != dt {
		return n.Errorf("operands are %v and %v", dt, l.dtype(b))
	}
	cnt := ir.NumElements(oShape)
	if cnt == 0 {
		return nil
	}
	shape, st := coalesce(oShape, sa, sb)
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	l.emit(kernel(kname, "PBinary", cnt, binaryParams(op, cnt, out, a, b, shape, st[0], st[1])))
	return nil
}

func (l *lowerer) unary(n *ir.Node, op int64) error {
	x, err := l.in(n, 0)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	var kname string
	switch dt := l.dtype(x); {
	case dt == ir.Float && op != unNot:
		kname = "unary_f32"
	case dt == ir.Int64 && (op == unNeg || op == unAbs || op == unRelu):
		kname = "unary_i64"
	case dt == ir.Bool && op == unNot:
		kname = "unary_u8"
	default:
		return n.Errorf("%s on %v is not supported on the gpu backend", n.OpType, dt)
	}
	s, _ := l.shape(x)
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel(kname, "PUnary", cnt, unaryParams(op, cnt, out, x)))
	}
	return nil
}

func (l *lowerer) cast(n *ir.Node) error {
	x := n.Input(0)
	from, to := l.dtype(x), l.dtype(n.Outputs[0])
	if from == to {
		return l.aliasOut(n)
	}
	ok := func(d ir.DType) bool {
		for _, t := range castTypes {
			if t == d {
				return true
			}
		}
		return false
	}
	if !ok(from) || !ok(to) {
		return n.Errorf("Cast from %v to %v is not supported on the gpu backend", from, to)
	}
	x, err := l.in(n, 0)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	s, _ := l.shape(x)
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel("cast_any", "PCast", cnt, castParams(cnt, from, to, out, x)))
	}
	return nil
}

func (l *lowerer) dropout(n *ir.Node) error {
	if tm := n.Input(2); tm != "" {
		c := l.types[tm].Const
		if c == nil {
			return n.Errorf("training_mode must be a constant on the gpu backend")
		}
		if b := c.Bools(); len(b) == 1 && b[0] {
			ratio := 0.5
			if r := n.Input(1); r != "" {
				rc := l.types[r].Const
				if rc == nil || rc.Len() != 1 {
					return n.Errorf("ratio must be a constant scalar on the gpu backend")
				}
				f, err := ops.CastTensor(rc, ir.Double)
				if err != nil {
					return n.Errorf("%w", err)
				}
				ratio = f.Data.([]float64)[0]
			}
			if ratio != 0 {
				return n.Errorf("training mode with ratio %g is not supported (attnrun runs inference only)", ratio)
			}
		}
	}
	if err := l.aliasOut(n); err != nil {
		return err
	}
	if len(n.Outputs) < 2 || n.Outputs[1] == "" {
		return nil
	}
	mask, err := l.out(n, 1)
	if err != nil {
		return err
	}
	s, _ := l.shape(n.Outputs[1])
	var bits uint64 = 1
	kname := "fill_1"
	if dt := l.dtype(n.Outputs[1]); dt == ir.Float {
		bits, kname = uint64(math.Float32bits(1)), "fill_4"
	} else if dt != ir.Bool {
		return n.Errorf("a %v mask output is not supported on the gpu backend", dt)
	}
	if cnt := ir.NumElements(s); cnt > 0 {
		l.emit(kernel(kname, "PFill", cnt, fillParams(cnt, mask, bits)))
	}
	return nil
}

func (l *lowerer) where(n *ir.Node) error {
	var names [3]string
	for i := range names {
		v, err := l.in(n, i)
		if err != nil {
			return err
		}
		names[i] = v
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	if l.dtype(names[0]) != ir.Bool {
		return n.Errorf("condition is %v, want bool", l.dtype(names[0]))
	}
	oShape, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	var st [3][]int
	for i, v := range names {
		s, _ := l.shape(v)
		if st[i], err = ops.BroadcastStrides(oShape, s); err != nil {
			return n.Errorf("%w", err)
		}
	}
	kname, err := elemKernel("where", l.dtype(names[1]))
	if err != nil {
		return n.Errorf("%w", err)
	}
	cnt := ir.NumElements(oShape)
	if cnt == 0 {
		return nil
	}
	shape, cs := coalesce(oShape, st[0], st[1], st[2])
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	l.emit(kernel(kname, "PWhere", cnt, whereParams(cnt, out, names[0], names[1], names[2], shape, cs[0], cs[1], cs[2])))
	return nil
}

// copyKernel emits one strided copy over shape from in (at byte offset
// inOff, element strides sin) to out (outOff, sout).
func (l *lowerer) copyKernel(dt ir.DType, out string, outOff int64, in string, inOff int64, shape, sin, sout []int) error {
	cnt := ir.NumElements(shape)
	if cnt == 0 {
		return nil
	}
	kname, err := elemKernel("copy", dt)
	if err != nil {
		return l.node.Errorf("%w", err)
	}
	sh, st := coalesce(shape, sin, sout)
	if err := l.stridedOK(sh); err != nil {
		return err
	}
	l.emit(kernel(kname, "PCopy", cnt, copyParams(cnt, out, outOff, in, inOff, sh, st[0], st[1])))
	return nil
}

// unaryMove reads input 0 and allocates output 0 of a data movement op.
func (l *lowerer) unaryMove(n *ir.Node) (in, out string, inShape, outShape []int, err error) {
	if in, err = l.in(n, 0); err != nil {
		return
	}
	if out, err = l.out(n, 0); err != nil {
		return
	}
	if inShape, err = l.shape(in); err != nil {
		return
	}
	outShape, err = l.shape(n.Outputs[0])
	return
}

func (l *lowerer) transpose(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	perm := make([]int, len(s))
	if p, ok, err := n.AttrInts("perm"); err != nil {
		return n.Errorf("%w", err)
	} else if ok {
		if len(p) != len(s) {
			return n.Errorf("perm %v for rank %d", p, len(s))
		}
		for i, v := range p {
			perm[i] = int(v)
		}
	} else {
		for i := range perm {
			perm[i] = len(s) - 1 - i
		}
	}
	cs := contiguous(s)
	sin := make([]int, len(s))
	for d, p := range perm {
		if p < 0 || p >= len(s) {
			return n.Errorf("perm %v is out of range", perm)
		}
		sin[d] = cs[p]
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, o, sin, contiguous(o))
}

func (l *lowerer) expand(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	sin, err := ops.BroadcastStrides(o, s)
	if err != nil {
		return n.Errorf("%w", err)
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, o, sin, contiguous(o))
}

func (l *lowerer) tile(n *ir.Node) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if len(s) != len(o) {
		return n.Errorf("input rank %d, output rank %d", len(s), len(o))
	}
	if ir.NumElements(o) == 0 {
		return nil
	}
	// Output dim i of size r·s[i] is walked as [r, s[i]]: the repeat reads
	// the input again (stride 0), the inner index steps through it.
	cs, co := contiguous(s), contiguous(o)
	var shape, sin, sout []int
	for i := range s {
		r := o[i] / s[i]
		shape = append(shape, r, s[i])
		sin = append(sin, 0, cs[i])
		sout = append(sout, co[i]*s[i], co[i])
	}
	return l.copyKernel(l.dtype(in), out, 0, in, 0, shape, sin, sout)
}

func (l *lowerer) concat(n *ir.Node) error {
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	o, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	a, err := n.AttrInt("axis", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	axis, err := ops.NormAxis(a, len(o))
	if err != nil {
		return n.Errorf("%w", err)
	}
	co := contiguous(o)
	esz := int64(l.dtype(n.Outputs[0]).Size())
	pos := 0
	for i := range n.Inputs {
		if n.Inputs[i] == "" {
			continue
		}
		in, err := l.in(n, i)
		if err != nil {
			return err
		}
		s, err := l.shape(in)
		if err != nil {
			return err
		}
		if err := l.copyKernel(l.dtype(in), out, int64(pos*co[axis])*esz, in, 0, s, contiguous(s), co); err != nil {
			return err
		}
		pos += s[axis]
	}
	return nil
}

func (l *lowerer) split(n *ir.Node) error {
	in, err := l.in(n, 0)
	if err != nil {
		return err
	}
	s, err := l.shape(in)
	if err != nil {
		return err
	}
	a, err := n.AttrInt("axis", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	axis, err := ops.NormAxis(a, len(s))
	if err != nil {
		return n.Errorf("%w", err)
	}
	cs := contiguous(s)
	esz := int64(l.dtype(in).Size())
	pos := 0
	for i := range n.Outputs {
		if n.Outputs[i] == "" {
			continue
		}
		o, err := l.shape(n.Outputs[i])
		if err != nil {
			return err
		}
		out, err := l.out(n, i)
		if err != nil {
			return err
		}
		if err := l.copyKernel(l.dtype(in), out, 0, in, int64(pos*cs[axis])*esz, o, cs, contiguous(o)); err != nil {
			return err
		}
		pos += o[axis]
	}
	return nil
}

// constInts reads a constant integer input (Slice's starts, ...); absent
// inputs give nil, false.
func (l *lowerer) constInts(n *ir.Node, i int) ([]int64, bool, error) {
	name := n.Input(i)
	if name == "" {
		return nil, false, nil
	}
	c := l.types[name].Const
	if c == nil {
		return nil, false, n.Errorf("input %d (%q) must be known before running on the gpu backend", i, name)
	}
	v, err := c.AsInt64s()
	if err != nil {
		return nil, false, n.Errorf("input %d: %w", i, err)
	}
	return v, true, nil
}

func (l *lowerer) slice(n *ir.Node, opset int) error {
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	var starts, ends, axes, steps []int64
	var hasAxes, hasSteps bool
	if opset < 10 {
		var ok bool
		if starts, ok, err = n.AttrInts("starts"); err != nil || !ok {
			return n.Errorf("attribute starts: missing or invalid (%v)", err)
		}
		if ends, ok, err = n.AttrInts("ends"); err != nil || !ok {
			return n.Errorf("attribute ends: missing or invalid (%v)", err)
		}
		if axes, hasAxes, err = n.AttrInts("axes"); err != nil {
			return n.Errorf("%w", err)
		}
	} else {
		if starts, _, err = l.constInts(n, 1); err != nil {
			return err
		}
		if ends, _, err = l.constInts(n, 2); err != nil {
			return err
		}
		if axes, hasAxes, err = l.constInts(n, 3); err != nil {
			return err
		}
		if steps, hasSteps, err = l.constInts(n, 4); err != nil {
			return err
		}
	}
	firsts, stepOf, err := sliceWindow(s, starts, ends, axes, steps, hasAxes, hasSteps)
	if err != nil {
		return n.Errorf("%w", err)
	}
	cs := contiguous(s)
	sin := make([]int, len(s))
	off := int64(0)
	for d := range s {
		sin[d] = cs[d] * int(stepOf[d])
		off += firsts[d] * int64(cs[d])
	}
	if ir.NumElements(o) == 0 {
		return nil
	}
	return l.copyKernel(l.dtype(in), out, 0, in, off*int64(l.dtype(in).Size()), o, sin, contiguous(o))
}

// sliceWindow resolves Slice's parameters against a concrete shape: the
// first index and the step along every dim (ONNX clamping rules).
func sliceWindow(shape []int, starts, ends, axes, steps []int64, hasAxes, hasSteps bool) (firsts, stepOf []int64, err error) {
	k := len(starts)
	if len(ends) != k || (hasAxes && len(axes) != k) || (hasSteps && len(steps) != k) {
		return nil, nil, fmt.Errorf("starts %v, ends %v, axes %v, steps %v differ in length", starts, ends, axes, steps)
	}
	firsts = make([]int64, len(shape))
	stepOf = make([]int64, len(shape))
	for d := range stepOf {
		stepOf[d] = 1
	}
	for i := 0; i < k; i++ {
		ax := int64(i)
		if hasAxes {
			ax = axes[i]
		}
		a, err := ops.NormAxis(ax, len(shape))
		if err != nil {
			return nil, nil, err
		}
		step := int64(1)
		if hasSteps {
			step = steps[i]
		}
		if step == 0 {
			return nil, nil, fmt.Errorf("steps %v contain 0", steps)
		}
		firsts[a], _ = ops.ResolveSlice(int64(shape[a]), starts[i], ends[i], step)
		stepOf[a] = step
	}
	return firsts, stepOf, nil
}

func (l *lowerer) gather(n *ir.Node) error {
	data, err := l.in(n, 0)
	if err != nil {
		return err
	}
	idx, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	s, _ := l.shape(data)
	is, _ := l.shape(idx)
	a, err := n.AttrInt("axis", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	axis, err := ops.NormAxis(a, len(s))
	if err != nil {
		return n.Errorf("%w", err)
	}
	idt := l.dtype(idx)
	if idt != ir.Int64 && idt != ir.Int32 {
		return n.Errorf("indices are %v, want int32 or int64", idt)
	}
	kname, err := elemKernel("gather", l.dtype(data))
	if err != nil {
		return n.Errorf("%w", err)
	}
	outer, inner := ir.NumElements(s[:axis]), ir.NumElements(s[axis+1:])
	nidx := ir.NumElements(is)
	cnt := outer * nidx * inner
	if cnt == 0 {
		return nil
	}
	l.pl.usesErr = true
	l.emit(kernel(kname, "PGather", cnt, gatherParams(cnt, out, data, idx, idt == ir.Int64, outer, int64(s[axis]), nidx, inner, errFlagVal)))
	return nil
}

func (l *lowerer) constantOfShape(n *ir.Node) error {
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	o, err := l.shape(n.Outputs[0])
	if err != nil {
		return err
	}
	dt := l.dtype(n.Outputs[0])
	val := ir.Scalar(float32(0))
	if a := n.Attr("value"); a != nil && a.Tensor != nil {
		val = a.Tensor
	}
	if val.Len() != 1 || val.DType != dt {
		return n.Errorf("value attribute %v does not give one %v element", val, dt)
	}
	return l.fill(n, out, o, val)
}

// fill emits a kernel setting every element of out (of shape o) to val's
// one element.
func (l *lowerer) fill(n *ir.Node, out string, o []int, val *ir.Tensor) error {
	raw, err := tensorBytes(val)
	if err != nil {
		return n.Errorf("%w", err)
	}
	var word [8]byte
	copy(word[:], raw)
	kname, err := elemKernel("fill", val.DType)
	if err != nil {
		return n.Errorf("%w", err)
	}
	if cnt := ir.NumElements(o); cnt > 0 {
		l.emit(kernel(kname, "PFill", cnt, fillParams(cnt, out, binary.LittleEndian.Uint64(word[:]))))
	}
	return nil
}

// pad lowers Pad in constant mode (opset 11 on: pads, constant_value and
// axes are inputs, known before running): a fill of the output with the
// constant, then a strided copy of the kept part of the input (negative pads
// crop). The other modes are refused.
func (l *lowerer) pad(n *ir.Node) error {
	mode, err := n.AttrString("mode", "constant")
	if err != nil {
		return n.Errorf("%w", err)
	}
	if mode != "constant" {
		return n.Errorf("Pad mode %q is not supported on the gpu backend (only constant)", mode)
	}
	in, out, s, o, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	pads, _, err := l.constInts(n, 1)
	if err != nil {
		return err
	}
	axes, hasAxes, err := l.constInts(n, 3)
	if err != nil {
		return err
	}
	if !hasAxes {
		axes = make([]int64, len(s))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(pads) != 2*len(axes) {
		return n.Errorf("pads has %d values for %d axes", len(pads), len(axes))
	}
	begin := make([]int, len(s))
	for i, a := range axes {
		ax, err := ops.NormAxis(a, len(s))
		if err != nil {
			return n.Errorf("%w", err)
		}
		begin[ax] = int(pads[i])
	}
	dt := l.dtype(in)
	val := ir.NewTensor(dt, []int{1})
	if c := n.Input(2); c != "" {
		if val = l.types[c].Const; val == nil || val.Len() != 1 {
			return n.Errorf("constant_value must be a scalar known before running on the gpu backend")
		}
	}
	if err := l.fill(n, out, o, val); err != nil {
		return err
	}
	// The kept region: input index j maps to output index j + begin.
	cs, co := contiguous(s), contiguous(o)
	esz := int64(dt.Size())
	region := make([]int, len(s))
	var inOff, outOff int64
	for d := range s {
		from := max(0, -begin[d]) // first input index kept
		to := max(0, begin[d])    // where it lands
		region[d] = max(0, min(s[d]-from, o[d]-to))
		inOff += int64(from*cs[d]) * esz
		outOff += int64(to*co[d]) * esz
	}
	return l.copyKernel(dt, out, outOff, in, inOff, region, cs, co)
}

func (l *lowerer) softmax(n *ir.Node, opset int) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if l.dtype(in) != ir.Float {
		return n.Errorf("Softmax on %v is not supported on the gpu backend", l.dtype(in))
	}
	def := int64(-1)
	if opset < 13 {
		def = 1
	}
	a, err := n.AttrInt("axis", def)
	if err != nil {
		return n.Errorf("%w", err)
	}
	axis, err := ops.NormAxis(a, len(s))
	if err != nil {
		return n.Errorf("%w", err)
	}
	rows, cols, inner := softmaxGeometry(s, axis, opset)
	if rows == 0 || cols == 0 {
		return nil
	}
	k := &launch{kernel: "softmax_f32", params: "PSoftmax", fields: softmaxParams(out, in, rows, cols, inner).fields}
	k.grid = [3]uint32{uint32(min(rows, maxGridX)), 1, 1}
	k.block = [3]uint32{rowBlock(cols), 1, 1}
	l.emit(k)
	return nil
}

// softmaxGeometry gives the softmax rows, row length and element spacing:
// before opset 13 the input is coerced to 2-D at axis; from 13 on it is
// one axis.
func softmaxGeometry(s []int, axis, opset int) (rows, cols, inner int64) {
	if opset < 13 {
		return ir.NumElements(s[:axis]), ir.NumElements(s[axis:]), 1
	}
	outer, inner := ir.NumElements(s[:axis]), ir.NumElements(s[axis+1:])
	return outer * inner, int64(s[axis]), inner
}

// normArgs reads a normalization's input, output, shape, axis and epsilon
// (LayerNormalization, RMSNormalization).
func (l *lowerer) normArgs(n *ir.Node) (in, out string, s []int, axis int, eps float32, err error) {
	if in, out, s, _, err = l.unaryMove(n); err != nil {
		return
	}
	a, err := n.AttrInt("axis", -1)
	if err != nil {
		return in, out, s, 0, 0, n.Errorf("%w", err)
	}
	if eps, err = n.AttrFloat("epsilon", 1e-5); err != nil {
		return in, out, s, 0, 0, n.Errorf("%w", err)
	}
	if axis, err = ops.NormAxis(a, len(s)); err != nil {
		return in, out, s, 0, 0, n.Errorf("%w", err)
	}
	return in, out, s, axis, eps, nil
}

// emitRows launches a one-block-per-row kernel over rows of cols elements.
func (l *lowerer) emitRows(name, params string, pb *paramBuilder, rows, cols int64) {
	k := &launch{kernel: name, params: params, fields: pb.fields}
	k.grid = [3]uint32{uint32(min(rows, maxGridX)), 1, 1}
	k.block = [3]uint32{rowBlock(cols), 1, 1}
	l.emit(k)
}

func (l *lowerer) layerNorm(n *ir.Node) error {
	in, out, s, axis, eps, err := l.normArgs(n)
	if err != nil {
		return err
	}
	rows, cols := ir.NumElements(s[:axis]), ir.NumElements(s[axis:])
	param := func(i int) (string, int64, error) {
		if n.Input(i) == "" {
			return "", 0, nil
		}
		v, err := l.in(n, i)
		if err != nil {
			return "", 0, err
		}
		ps, _ := l.shape(v)
		cnt := ir.NumElements(ps)
		if cnt != 1 && cnt != cols {
			return "", 0, n.Errorf("input %d of shape %v: the gpu kernel takes 1 or %d elements", i, ps, cols)
		}
		return v, cnt, nil
	}
	scale, scaleN, err := param(1)
	if err != nil {
		return err
	}
	bias, biasN, err := param(2)
	if err != nil {
		return err
	}
	var stats [2]string
	for i := 1; i <= 2 && i < len(n.Outputs); i++ {
		if stats[i-1], err = l.out(n, i); err != nil {
			return err
		}
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	l.emitRows("layernorm_f32", "PLayerNorm", layerNormParams(out, in, scale, bias, stats[0], stats[1], rows, cols, scaleN, biasN, float64(eps)), rows, cols)
	return nil
}

// rmsNorm lowers RMSNormalization to rmsnorm_f32. The scale is read as a
// pattern over X's trailing dims it covers: the input itself when it
// already has that shape, else (a constant) expanded on the host.
func (l *lowerer) rmsNorm(n *ir.Node) error {
	in, out, s, axis, eps, err := l.normArgs(n)
	if err != nil {
		return err
	}
	scale, err := l.in(n, 1)
	if err != nil {
		return err
	}
	if l.dtype(scale) != ir.Float {
		return n.Errorf("scale is %v; the gpu kernel takes float32", l.dtype(scale))
	}
	ss, _ := l.shape(scale)
	if len(ss) > len(s) {
		return n.Errorf("scale %v does not broadcast to X %v", ss, s)
	}
	k := min(axis, len(s)-len(ss))
	pattern := s[k:]
	if !ops.SameShape(ss, pattern) {
		c := l.types[scale].Const
		if c == nil {
			return n.Errorf("scale %v is computed at run time and broadcasts over X %v: the gpu kernel takes it only as X's trailing dims or as a constant", ss, s)
		}
		st, err := ops.BroadcastStrides(pattern, ss)
		if err != nil {
			return n.Errorf("scale %v does not broadcast to X %v", ss, s)
		}
		exp := ir.NewTensor(ir.Float, pattern)
		src, dst := c.Float32s(), exp.Float32s()
		for e := range dst {
			off, rem := 0, e
			for d := len(pattern) - 1; d >= 0; d-- {
				off += (rem % pattern[d]) * st[d]
				rem /= pattern[d]
			}
			dst[e] = src[off]
		}
		if scale, err = l.read(l.hostConst(scale+"#rms-expanded", exp)); err != nil {
			return err
		}
	}
	rows, cols := ir.NumElements(s[:axis]), ir.NumElements(s[axis:])
	if rows == 0 || cols == 0 {
		return nil
	}
	l.emitRows("rmsnorm_f32", "PRMSNorm", rmsNormParams(out, in, scale, rows, cols, ir.NumElements(pattern), float64(eps)), rows, cols)
	return nil
}

// rotary lowers RotaryEmbedding to rotary_f32; the shapes were checked by
// the op's inference.
func (l *lowerer) rotary(n *ir.Node) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	var names [3]string
	for i := 1; i <= 2 || (i == 3 && n.Input(3) != ""); i++ {
		if names[i-1], err = l.in(n, i); err != nil {
			return err
		}
	}
	for _, x := range []string{in, names[0], names[1]} {
		if l.dtype(x) != ir.Float {
			return n.Errorf("%q is %v; the gpu kernel takes float32", x, l.dtype(x))
		}
	}
	il, _ := n.AttrInt("interleaved", 0)
	rd, _ := n.AttrInt("rotary_embedding_dim", 0)
	a := rotaryArgs{out: out, in: in, cos: names[0], sin: names[1], pos: names[2], interleaved: il == 1}
	switch len(s) {
	case 4: // [B, H, S, D]
		a.s, a.h, a.d = int64(s[2]), int64(s[1]), int64(s[3])
		a.hStr, a.sStr, a.bStr = a.s*a.d, a.d, a.h*a.s*a.d
	case 3: // [B, S, H·D]
		nh, _ := n.AttrInt("num_heads", 0)
		if nh <= 0 || int64(s[2])%nh != 0 {
			return n.Errorf("3-D input %v needs num_heads dividing its last dim", s)
		}
		a.s, a.h, a.d = int64(s[1]), nh, int64(s[2])/nh
		a.hStr, a.sStr, a.bStr = a.d, int64(s[2]), a.s*int64(s[2])
	default:
		return n.Errorf("input %v must be 3-D or 4-D", s)
	}
	a.rd = rd
	if a.rd == 0 {
		a.rd = a.d
	}
	cs, _ := l.shape(names[0])
	if names[2] != "" {
		a.cacheRows = int64(cs[0])
		a.err = errFlagVal
		l.pl.usesErr = true
	} else {
		a.cacheRows = int64(s[0]) * a.s
	}
	a.n = ir.NumElements(s)
	if a.n == 0 {
		return nil
	}
	l.emit(kernel("rotary_f32", "PRotary", a.n, rotaryParams(a)))
	return nil
}

// matmulBatches splits a batched matrix product into cuBLAS calls. outB is
// the broadcast batch shape; sa, sb, sc the operands' element strides per
// batch dim (0 where broadcast). Dims that every operand walks evenly are
// merged, the innermost remaining dim becomes the strided batch of one
// call, and the others are looped over on the host. It returns one
// (aOff, bOff, cOff) element offset triple per call, the batch count and
// the per-call strides.
func matmulBatches(outB, sa, sb, sc []int) (offs [][3]int64, count int, stride [3]int64) {
	shape, st := coalesce(outB, sa, sb, sc)
	if len(shape) == 0 {
		return [][3]int64{{0, 0, 0}}, 1, [3]int64{}
	}
	last := len(shape) - 1
	count = shape[last]
	stride = [3]int64{int64(st[0][last]), int64(st[1][last]), int64(st[2][last])}
	outer := shape[:last]
	n := ir.NumElements(outer)
	idx := make([]int, len(outer))
	for c := int64(0); c < n; c++ {
		var o [3]int64
		for d, i := range idx {
			for k := 0; k < 3; k++ {
				o[k] += int64(i * st[k][d])
			}
		}
		offs = append(offs, o)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < outer[d] {
				break
			}
			idx[d] = 0
		}
	}
	return offs, count, stride
}

func (l *lowerer) matmul(n *ir.Node) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	if l.dtype(a) != ir.Float || l.dtype(b) != ir.Float {
		return n.Errorf("MatMul on %v × %v is not supported on the gpu backend", l.dtype(a), l.dtype(b))
	}
	if len(as) == 0 || len(bs) == 0 {
		return n.Errorf("MatMul of a scalar")
	}
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	m, k, k2, nn := as[len(as)-2], as[len(as)-1], bs[len(bs)-2], bs[len(bs)-1]
	if k != k2 {
		return n.Errorf("inner dims %d and %d differ", k, k2)
	}
	aB, bB := as[:len(as)-2], bs[:len(bs)-2]
	outB, err := ops.BroadcastShapes(aB, bB)
	if err != nil {
		return n.Errorf("%w", err)
	}
	total := ir.NumElements(outB) * int64(m) * int64(nn)
	if total == 0 {
		return nil
	}
	if k == 0 {
		l.emit(kernel("fill_4", "PFill", total, fillParams(total, out, 0)))
		return nil
	}
	sa, _ := ops.BroadcastStrides(outB, aB)
	sb, _ := ops.BroadcastStrides(outB, bB)
	sc := contiguous(outB)
	for d := range outB {
		sa[d] *= m * k
		sb[d] *= k * nn
		sc[d] *= m * nn
	}
	offs, count, stride := matmulBatches(outB, sa, sb, sc)
	mm := m
	if len(offs) == 1 && count > 1 && stride[1] == 0 && stride[0] == int64(m*k) && stride[2] == int64(m*nn) {
		// A shared right operand (x·W): one tall product.
		mm, count, stride = m*count, 1, [3]int64{}
	}
	for _, o := range offs {
		g := newGemm(false, false, mm, nn, k, 1, 0)
		g.a, g.b, g.c = a, b, out
		g.aOff, g.bOff, g.cOff = o[0]*4, o[1]*4, o[2]*4
		g.strideA, g.strideB, g.strideC, g.batch = stride[0], stride[1], stride[2], count
		l.emitGemm(g)
	}
	return nil
}

func (l *lowerer) gemm(n *ir.Node) error {
	a, err := l.in(n, 0)
	if err != nil {
		return err
	}
	b, err := l.in(n, 1)
	if err != nil {
		return err
	}
	alpha, err := n.AttrFloat("alpha", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	beta, err := n.AttrFloat("beta", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	ta, err := n.AttrInt("transA", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	tb, err := n.AttrInt("transB", 0)
	if err != nil {
		return n.Errorf("%w", err)
	}
	as, _ := l.shape(a)
	bs, _ := l.shape(b)
	if len(as) != 2 || len(bs) != 2 {
		return n.Errorf("Gemm needs 2-D operands, got %v and %v", as, bs)
	}
	m, k := as[0], as[1]
	if ta != 0 {
		m, k = k, m
	}
	k2, nn := bs[0], bs[1]
	if tb != 0 {
		k2, nn = nn, k2
	}
	if k != k2 {
		return n.Errorf("inner dims %d and %d differ", k, k2)
	}
	c := ""
	if n.Input(2) != "" && beta != 0 {
		if c, err = l.in(n, 2); err != nil {
			return err
		}
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	if m*nn == 0 {
		return nil
	}
	if c == "" {
		beta = 0
	} else {
		cs, _ := l.shape(c)
		sin, err := ops.BroadcastStrides([]int{m, nn}, cs)
		if err != nil {
			return n.Errorf("C: %w", err)
		}
		if err := l.copyKernel(ir.Float, out, 0, c, 0, []int{m, nn}, sin, []int{nn, 1}); err != nil {
			return err
		}
	}
	g := newGemm(ta != 0, tb != 0, m, nn, k, alpha, beta)
	g.a, g.b, g.c = a, b, out
	l.emitGemm(g)
	return nil
}

// attnOperand is one FusedAttention operand as the kernel reads it: its
// logical shape and the view (offset, element strides) over its input's
// data.
type attnOperand struct {
	shape   []int
	strides []int
	offset  int
}

// attnShapes are a FusedAttention node's concrete geometry.
type attnShapes struct {
	batch                  []int // the logical batch (heads of Q)
	q, k, v, out           attnOperand
	qB, kB, vB, mB         []int
	sq, d, sk, dv          int
	msq, msk               int
	kT, hasMask            bool
	scale, fill, maskScale float32
	maskKind               string
	// ONNX Attention's extras (ops/attention.go).
	group       int
	softcap     float32
	causal      bool
	causalOff   int
	padKeys     bool
	hasLens     bool
	scoresMode  string
	scoresShape []int
}

// attnView reads a view attribute (q_view, ...) or returns the contiguous
// view of shape.
func attnView(n *ir.Node, attr string, shape []int) (attnOperand, error) {
	ints, ok, err := n.AttrInts(attr)
	if err != nil {
		return attnOperand{}, n.Errorf("%w", err)
	}
	if !ok {
		return attnOperand{shape: shape, strides: contiguous(shape)}, nil
	}
	v, err := ops.ParseView(ints)
	if err != nil {
		return attnOperand{}, n.Errorf("attribute %s: %w", attr, err)
	}
	return attnOperand{shape: v.Shape, strides: v.Strides, offset: v.Offset}, nil
}

func attnGeometry(n *ir.Node, types map[string]ops.Value) (attnShapes, error) {
	var g attnShapes
	shape := func(i int) ([]int, error) {
		v := types[n.Input(i)]
		dims, ok := v.Type.Shape.Concrete()
		if !ok || !v.Type.RankKnown {
			return nil, n.Errorf("input %d has no concrete shape", i)
		}
		return dims, nil
	}
	var ops3 [3]attnOperand
	for i, attr := range []string{"q_view", "k_view", "v_view"} {
		s, err := shape(i)
		if err != nil {
			return g, err
		}
		if ops3[i], err = attnView(n, attr, s); err != nil {
			return g, err
		}
		if len(ops3[i].shape) < 2 {
			return g, n.Errorf("Q, K, V need rank ≥ 2")
		}
	}
	g.q, g.k, g.v = ops3[0], ops3[1], ops3[2]
	q, k, v := g.q.shape, g.k.shape, g.v.shape
	kt, err := n.AttrInt("k_transposed", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.kT = kt == 1
	g.qB, g.sq, g.d = q[:len(q)-2], q[len(q)-2], q[len(q)-1]
	g.kB = k[:len(k)-2]
	kd := k[len(k)-1]
	g.sk = k[len(k)-2]
	if g.kT {
		kd, g.sk = k[len(k)-2], k[len(k)-1]
	}
	g.vB, g.dv = v[:len(v)-2], v[len(v)-1]
	if kd != g.d || v[len(v)-2] != g.sk {
		return g, n.Errorf("Q %v, K %v, V %v do not fit together", q, k, v)
	}
	if g.scale, err = n.AttrFloat("scale", 1); err != nil {
		return g, n.Errorf("%w", err)
	}
	group, err := n.AttrInt("kv_group", 1)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.group = int(group)
	// Broadcast with K's and V's heads standing for Q's (grouped heads).
	kBB, vBB := g.kB, g.vB
	if g.group > 1 {
		if len(g.qB) == 0 || len(g.kB) == 0 || len(g.vB) == 0 {
			return g, n.Errorf("kv_group needs a heads dim")
		}
		hq := g.qB[len(g.qB)-1]
		for _, b := range []*[]int{&kBB, &vBB} {
			c := append([]int{}, *b...)
			if h := c[len(c)-1]; h != 1 {
				if h*g.group != hq {
					return g, n.Errorf("kv_group %d: Q has %d heads, K/V %d", g.group, hq, h)
				}
				c[len(c)-1] = hq
			}
			*b = c
		}
	}
	if g.softcap, err = n.AttrFloat("softcap", 0); err != nil {
		return g, n.Errorf("%w", err)
	}
	causal, err := n.AttrInt("causal", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.causal = causal == 1
	off, err := n.AttrInt("causal_offset", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.causalOff = int(off)
	pad, err := n.AttrInt("mask_pad_keys", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.padKeys = pad == 1
	g.msq, g.msk = 1, 1
	if n.Input(3) != "" {
		g.hasMask = true
		m, err := shape(3)
		if err != nil {
			return g, err
		}
		for len(m) < 2 {
			m = append([]int{1}, m...)
		}
		g.mB, g.msq, g.msk = m[:len(m)-2], m[len(m)-2], m[len(m)-1]
		badKeys := g.msk != 1 && g.msk != g.sk
		if g.padKeys {
			badKeys = g.msk > g.sk
		}
		if (g.msq != 1 && g.msq != g.sq) || badKeys {
			return g, n.Errorf("mask %v does not broadcast to the scores [%d %d]", m, g.sq, g.sk)
		}
		if g.maskKind, err = n.AttrString("mask_kind", ""); err != nil {
			return g, n.Errorf("%w", err)
		}
		if g.fill, err = n.AttrFloat("mask_fill", float32(math.Inf(-1))); err != nil {
			return g, n.Errorf("%w", err)
		}
		if g.maskScale, err = n.AttrFloat("mask_scale", 1); err != nil {
			return g, n.Errorf("%w", err)
		}
	}
	g.hasLens = n.Input(4) != ""
	if n.Input(5) != "" {
		// attention_f32 applies one mask; a chain with a second additive
		// term (FusedAttention's bias) runs its original nodes instead.
		return g, n.Errorf("a bias input (5) beside the mask: the attention kernel takes one mask")
	}
	if g.batch, err = ops.BroadcastShapes(g.qB, kBB, vBB, g.mB); err != nil {
		return g, n.Errorf("%w", err)
	}
	logical := append(append([]int{}, g.batch...), g.sq, g.dv)
	if g.out, err = attnView(n, "out_view", logical); err != nil {
		return g, err
	}
	if len(g.out.shape) != len(logical) || !ops.SameShape(g.out.shape, logical) {
		return g, n.Errorf("out_view %v does not have the result's shape %v", g.out.shape, logical)
	}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		if g.scoresMode, err = n.AttrString("scores_mode", ""); err != nil {
			return g, n.Errorf("%w", err)
		}
		g.scoresShape = append(append([]int{}, g.batch...), g.sq, g.sk)
	}
	return g, nil
}

// viewBatchStrides returns the element strides with which an operand whose
// logical batch dims are dims (with strides st) is read for each dim of the
// broadcast batch shape: its own stride where it has the dim, 0 where it
// is broadcast.
func viewBatchStrides(batch, dims, st []int) []int {
	out := make([]int, len(batch))
	off := len(batch) - len(dims)
	for i, d := range dims {
		if d != 1 {
			out[off+i] = st[i]
		}
	}
	return out
}

// attnLowerable reports whether the attention kernel takes a fused node's
// head sizes and attributes; if not, the graph's original nodes run
// instead. The kernel has no masked_rows_uniform (its rows that see no key
// are NaN) and no finite causal_fill (it cuts past the diagonal with no
// per-row check), so a node with either runs unfused, as the export wrote
// it.
func attnLowerable(n *ir.Node, types map[string]ops.Value) bool {
	if u, _ := n.AttrInt("masked_rows_uniform", 0); u != 0 {
		return false
	}
	if f, err := n.AttrFloat("causal_fill", float32(math.Inf(-1))); err != nil || !math.IsInf(float64(f), -1) {
		return false
	}
	g, err := attnGeometry(n, types)
	return err == nil && g.d <= attnMaxD && g.dv <= attnMaxD
}

// attnScoresModes maps FusedAttention's scores_mode to attention_f32's.
var attnScoresModes = map[string]int{
	ops.ScoresRaw: scoresRaw, ops.ScoresSoftcapped: scoresSoftcapped, ops.ScoresBiased: scoresBiased, ops.ScoresWeights: scoresWeights,
}

func (l *lowerer) attention(n *ir.Node) error {
	g, err := attnGeometry(n, l.types)
	if err != nil {
		return err
	}
	var names [5]string
	for i := 0; i < 5; i++ {
		if (i == 3 && !g.hasMask) || (i == 4 && !g.hasLens) {
			continue
		}
		if names[i], err = l.in(n, i); err != nil {
			return err
		}
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	scores := ""
	if g.scoresMode != "" {
		if scores, err = l.out(n, 1); err != nil {
			return err
		}
	}
	batches := int(ir.NumElements(g.batch))
	if batches*g.sq*(g.dv+g.sk) == 0 {
		return nil
	}
	if g.sk == 0 {
		// Zeros, written through the output view.
		return l.fillView(out, g.out)
	}
	a := attnArgs{out: out, q: names[0], k: names[1], v: names[2], mask: names[3],
		oOff: g.out.offset, qOff: g.q.offset, kOff: g.k.offset, vOff: g.v.offset,
		sq: g.sq, sk: g.sk, d: g.d, dv: g.dv, batches: batches,
		scale: float64(g.scale), fill: float64(g.fill), maskScale: float64(g.maskScale),
		softcap: float64(g.softcap), causal: g.causal, causalOff: g.causalOff, maskKeys: g.sk,
		kvLen: names[4], scores: scores, scoresMode: attnScoresModes[g.scoresMode]}
	rq, rk, rv, ro := len(g.q.shape), len(g.k.shape), len(g.v.shape), len(g.out.shape)
	a.qRS, a.qCS = g.q.strides[rq-2], g.q.strides[rq-1]
	a.kJS, a.kCS = g.k.strides[rk-2], g.k.strides[rk-1]
	if g.kT {
		a.kJS, a.kCS = a.kCS, a.kJS
	}
	a.vJS, a.vCS = g.v.strides[rv-2], g.v.strides[rv-1]
	a.oRS, a.oCS = g.out.strides[ro-2], g.out.strides[ro-1]
	bq := viewBatchStrides(g.batch, g.qB, g.q.strides)
	bk := viewBatchStrides(g.batch, g.kB, g.k.strides)
	bv := viewBatchStrides(g.batch, g.vB, g.v.strides)
	bo := append([]int{}, g.out.strides[:len(g.batch)]...)
	bm := make([]int, len(g.batch))
	bl := make([]int, len(g.batch))
	if g.hasLens {
		lens, err := l.shape(names[4])
		if err != nil {
			return err
		}
		if len(lens) != 1 || len(g.batch) == 0 || (lens[0] != 1 && lens[0] != g.batch[0]) {
			return n.Errorf("kv_lengths %v does not fit the batch %v", lens, g.batch)
		}
		if lens[0] != 1 {
			bl[0] = 1
		}
	}
	if g.hasMask {
		mshape := append(append([]int{}, g.mB...), g.msq, g.msk)
		mst := contiguous(mshape)
		bm = viewBatchStrides(g.batch, g.mB, mst)
		switch g.maskKind {
		case ops.MaskBoolTrueMasks:
			a.maskKind = maskBoolTrue
		case ops.MaskBoolFalseMasks:
			a.maskKind = maskBoolFalse
		case ops.MaskAdditive:
			a.maskKind = maskAdditive
		default:
			return n.Errorf("mask_kind %q", g.maskKind)
		}
		if want := attnMaskDType(g.maskKind); l.dtype(names[3]) != want {
			return n.Errorf("mask is %v, mask_kind %q takes %v", l.dtype(names[3]), g.maskKind, want)
		}
		if g.msq != 1 {
			a.mRow = g.msk
		}
		if g.msk != 1 {
			a.mCol = 1
		}
		if g.padKeys && g.msk < g.sk {
			a.maskKeys = g.msk
			if g.msk == 1 {
				a.mCol = 0 // one key: no broadcast, the rest is padding
			}
		}
	}
	shape := g.batch
	all := [][]int{bq, bk, bv, bm, bo, bl}
	if g.group > 1 && len(g.batch) > 0 {
		// Query head h = kv head h/g and member h%g: the heads axis
		// becomes (kv heads, g), along which K and V do not move.
		ha := len(g.batch) - 1
		shape = append(append([]int{}, g.batch[:ha]...), g.batch[ha]/g.group, g.group)
		for k, st := range all {
			s := st[ha]
			split := []int{s * g.group, s}
			if k == 1 || k == 2 { // K, V: their own heads axis
				split = []int{s, 0}
			}
			all[k] = append(append(append([]int{}, st[:ha]...), split...), st[ha+1:]...)
		}
	}
	shape, st := coalesce(shape, all...)
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	a.bshape, a.bq, a.bk, a.bv, a.bmask, a.bo, a.bl = shape, st[0], st[1], st[2], st[3], st[4], st[5]
	k := &launch{kernel: "attention_f32", params: "PAttn", fields: attnParams(a).fields,
		grid: attnGrid(g.sq, batches), block: [3]uint32{attnThreads, 1, 1}, shmem: attnShared(g.d, g.dv)}
	l.emit(k)
	return nil
}

// fillView writes float32 zeros through a view of out.
func (l *lowerer) fillView(out string, v attnOperand) error {
	cnt := ir.NumElements(v.shape)
	if cnt == 0 {
		return nil
	}
	// A zero source read with stride 0: a one-element constant.
	zero := l.hostConst("#zero-f32", ir.Scalar(float32(0)))
	if _, err := l.read(zero); err != nil {
		return err
	}
	return l.copyKernel(ir.Float, out, 4*int64(v.offset), zero, 0, v.shape, make([]int, len(v.shape)), v.strides)
}

func (l *lowerer) trilu(n *ir.Node) error {
	in, out, s, _, err := l.unaryMove(n)
	if err != nil {
		return err
	}
	if len(s) < 2 {
		return n.Errorf("input must have rank 2 or more, got %v", s)
	}
	upper, err := n.AttrInt("upper", 1)
	if err != nil {
		return n.Errorf("%w", err)
	}
	k := int64(0)
	if n.Input(1) != "" {
		v, _, err := l.constInts(n, 1)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return n.Errorf("k must be a scalar")
		}
		k = v[0]
	}
	kname, err := elemKernel("trilu", l.dtype(in))
	if err != nil {
		return n.Errorf("%w", err)
	}
	cnt := ir.NumElements(s)
	if cnt > 0 {
		l.emit(kernel(kname, "PTrilu", cnt, triluParams(cnt, int64(s[len(s)-2]), int64(s[len(s)-1]), k, upper != 0, out, in)))
	}
	return nil
}

func attnMaskDType(kind string) ir.DType {
	if kind == ops.MaskAdditive {
		return ir.Float
	}
	return ir.Bool
}
