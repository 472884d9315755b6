package ops

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
)

// Einsum (opset 12): Einstein summation over 1..N inputs of one numeric
// type, written as numpy writes it. The equation has one comma-separated
// term per input, each a string of letter labels (case matters), one per
// dim, with at most one "..." standing for the dims no label names; spaces
// are ignored. An explicit output follows "->"; without one the output is
// the ellipsis dims followed by the labels that appear exactly once, in
// alphabetical order (uppercase first). A label repeated within a term takes
// the diagonal; labels missing from the output are summed. Ellipsis dims
// broadcast with numpy rules, and so, as in numpy, does a label of size 1
// against the same label of another size in another input. As in numpy, an
// explicit output must keep the ellipsis dims ("...") when there are any.
//
// Kernels: a float32, float16 or float64 contraction of two inputs whose
// labels each fall into one of batch (both inputs and the output), m (first
// input and output), n (second input and output) or k (both inputs,
// summed), with no diagonal and no broadcasting, runs as batched GEMM
// (blas.Sgemm, or blas.Dgemm for float64); operands whose dims are already in
// [batch, m, k] / [batch, k, m] (and [batch, k, n] / [batch, n, k]) order are
// used in place, others are transposed first. That covers the attention
// forms "bhqd,bhkd->bhqk" and "bhqk,bhkd->bhqd", and "bij,bjk->bik".
// Everything else goes through a reference loop over every label, which
// accumulates floats in float64 and integers in int64 (wrapping to the
// output type, which gives the same result as wrapping at every step).

func init() {
	Register(&Schema{
		Domain: DomainONNX, OpType: "Einsum", Since: 12, Until: MaxOpset,
		MinInputs: 1, MaxInputs: -1, TypeInput: 0, DTypes: NumericTypes,
		Infer: inferEinsum, Run: runEinsum, RunInto: runEinsumInto,
		Doc: "Einstein summation (numpy equation syntax: diagonals, sums, \"...\" broadcasting); batched GEMM where the labels allow",
	})
}

// Label ids: 'A'..'Z' are 0..25 and 'a'..'z' 26..51, so that sorting ids
// sorts labels as numpy does; the dims of the ellipsis get ids from
// einsumEllipsisBase on, right-aligned across inputs as in broadcasting.
const (
	einsumEllipsis     = -1 // marks "..." in a parsed term
	einsumEllipsisBase = 52
)

// einsumEquation is a parsed equation.
type einsumEquation struct {
	inputs   [][]int // label ids per term, einsumEllipsis for "..."
	output   []int   // the explicit output term, when explicit
	explicit bool
}

// einsumLabelName is a label id's letter ("..." for ellipsis dims).
func einsumLabelName(id int) string {
	switch {
	case id < 0 || id >= einsumEllipsisBase:
		return "..."
	case id < 26:
		return string(rune('A' + id))
	}
	return string(rune('a' + id - 26))
}

// parseEinsum parses an equation.
func parseEinsum(eq string) (*einsumEquation, error) {
	s := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, eq)
	lhs, rhs, explicit := strings.Cut(s, "->")
	if strings.Contains(rhs, "->") {
		return nil, fmt.Errorf("equation %q has more than one \"->\"", eq)
	}
	e := &einsumEquation{explicit: explicit}
	for _, t := range strings.Split(lhs, ",") {
		ids, err := parseEinsumTerm(t)
		if err != nil {
			return nil, fmt.Errorf("equation %q: %w", eq, err)
		}
		e.inputs = append(e.inputs, ids)
	}
	if !explicit {
		return e, nil
	}
	if strings.Contains(rhs, ",") {
		return nil, fmt.Errorf("equation %q: the output term %q has a comma", eq, rhs)
	}
	out, err := parseEinsumTerm(rhs)
	if err != nil {
		return nil, fmt.Errorf("equation %q: %w", eq, err)
	}
	seen := map[int]bool{}
	for _, id := range out {
		if seen[id] {
			return nil, fmt.Errorf("equation %q: output label %s appears twice", eq, einsumLabelName(id))
		}
		seen[id] = true
		if id == einsumEllipsis {
			if !slices.ContainsFunc(e.inputs, func(t []int) bool { return slices.Contains(t, einsumEllipsis) }) {
				return nil, fmt.Errorf("equation %q: the output has \"...\" but no input term does", eq)
			}
			continue
		}
		if !slices.ContainsFunc(e.inputs, func(t []int) bool { return slices.Contains(t, id) }) {
			return nil, fmt.Errorf("equation %q: output label %s is in no input term", eq, einsumLabelName(id))
		}
	}
	e.output = out
	return e, nil
}

// parseEinsumTerm parses one term into label ids.
func parseEinsumTerm(t string) ([]int, error) {
	ids := []int{}
	ell := false
	for i := 0; i < len(t); {
		switch c := t[i]; {
		case c == '.':
			if !strings.HasPrefix(t[i:], "...") {
				return nil, fmt.Errorf("term %q has a '.' outside an ellipsis \"...\"", t)
			}
			if ell {
				return nil, fmt.Errorf("term %q has more than one ellipsis", t)
			}
			ell = true
			ids = append(ids, einsumEllipsis)
			i += 3
		case c >= 'A' && c <= 'Z':
			ids = append(ids, int(c-'A'))
			i++
		case c >= 'a' && c <= 'z':
			ids = append(ids, 26+int(c-'a'))
			i++
		default:
			return nil, fmt.Errorf("term %q has %q; labels are letters", t, c)
		}
	}
	return ids, nil
}

// einsumBinding is an equation bound to input ranks: each input dim's label
// id and the output's label ids.
type einsumBinding struct {
	in       [][]int // per input, one label id per dim; nil when its rank is unknown
	out      []int   // output label ids, when outKnown
	outKnown bool    // false when the output has ellipsis dims of unknown number
	ellRank  int     // dims the ellipsis stands for (the largest over inputs)
}

// bind expands ellipses for input ranks (-1: unknown).
func (e *einsumEquation) bind(ranks []int) (*einsumBinding, error) {
	if len(ranks) != len(e.inputs) {
		return nil, fmt.Errorf("the equation has %d input terms, the node %d inputs", len(e.inputs), len(ranks))
	}
	b := &einsumBinding{in: make([][]int, len(ranks)), outKnown: true}
	ellUnknown, anyEll := false, false
	ellRanks := make([]int, len(ranks))
	for k, t := range e.inputs {
		hasEll := slices.Contains(t, einsumEllipsis)
		anyEll = anyEll || hasEll
		letters := len(t)
		if hasEll {
			letters--
		}
		switch r := ranks[k]; {
		case r < 0:
			ellUnknown = ellUnknown || hasEll
		case hasEll && r < letters:
			return nil, fmt.Errorf("input %d has rank %d, fewer dims than the %d labels of its term", k, r, letters)
		case !hasEll && r != letters:
			return nil, fmt.Errorf("input %d has rank %d, but its term has %d labels (and no \"...\")", k, r, letters)
		default:
			ellRanks[k] = r - letters
			b.ellRank = max(b.ellRank, r-letters)
		}
	}
	for k, t := range e.inputs {
		if ranks[k] < 0 {
			continue
		}
		ids := make([]int, 0, ranks[k])
		for _, id := range t {
			if id != einsumEllipsis {
				ids = append(ids, id)
				continue
			}
			for j := b.ellRank - ellRanks[k]; j < b.ellRank; j++ {
				ids = append(ids, einsumEllipsisBase+j)
			}
		}
		b.in[k] = ids
	}
	ellDims := func() {
		if ellUnknown {
			b.outKnown = false
		}
		for j := 0; j < b.ellRank; j++ {
			b.out = append(b.out, einsumEllipsisBase+j)
		}
	}
	if e.explicit {
		if !slices.Contains(e.output, einsumEllipsis) && b.ellRank > 0 {
			return nil, fmt.Errorf("the inputs' \"...\" stands for %d dims, which the output must keep (it has no \"...\")", b.ellRank)
		}
		for _, id := range e.output {
			if id == einsumEllipsis {
				ellDims()
			} else {
				b.out = append(b.out, id)
			}
		}
		return b, nil
	}
	if anyEll {
		ellDims()
	}
	var count [einsumEllipsisBase]int
	for _, t := range e.inputs {
		for _, id := range t {
			if id != einsumEllipsis {
				count[id]++
			}
		}
	}
	for id, c := range count {
		if c == 1 {
			b.out = append(b.out, id)
		}
	}
	return b, nil
}

func inferEinsum(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, len(in)); err != nil {
		return nil, err
	}
	dt, err := sameValueTypes(n, in)
	if err != nil {
		return nil, err
	}
	if err := checkComputeDType(n, "input", dt, NumericTypes); err != nil {
		return nil, err
	}
	eq, err := einsumEquationOf(n)
	if err != nil {
		return nil, err
	}
	ranks := make([]int, len(in))
	for k, v := range in {
		ranks[k] = -1
		if v.Type.RankKnown {
			ranks[k] = len(v.Type.Shape)
		}
	}
	b, err := eq.bind(ranks)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if !b.outKnown {
		return []Value{UnknownRank(dt)}, nil
	}
	// Each label's dim: the broadcast of its dims across inputs.
	dims := map[int]ir.Dim{}
	for k, ids := range b.in {
		own := map[int]ir.Dim{} // a label repeated within an input (a diagonal) needs equal dims
		for p, id := range ids {
			d := in[k].Type.Shape[p]
			if prev, ok := own[id]; ok && prev.Known() && d.Known() && prev.Value != d.Value {
				return nil, n.Errorf("label %s of input %d has sizes %d and %d", einsumLabelName(id), k, prev.Value, d.Value)
			}
			own[id] = d
			cur, ok := dims[id]
			if !ok {
				dims[id] = d
				continue
			}
			m, err := BroadcastDims(ir.Shape{cur}, ir.Shape{d})
			if err != nil {
				return nil, n.Errorf("label %s has dims %v and %v", einsumLabelName(id), cur, d)
			}
			dims[id] = m[0]
		}
	}
	out := make(ir.Shape, len(b.out))
	for i, id := range b.out {
		d, ok := dims[id]
		if !ok {
			d = ir.UnknownDim // only in inputs of unknown rank
		}
		out[i] = d
	}
	return []Value{Typed(dt, out)}, nil
}

// EinsumLabels binds an Einsum node's equation to its inputs' ranks and
// returns the label of each input dim and of each output dim; the dims an
// ellipsis stands for get labels of their own, shared across the terms as
// broadcasting aligns them. Labels are small non-negative ints (equal
// labels name the same index). Graph rewrites use it to read a two-input
// einsum as a product of permuted operands.
func EinsumLabels(n *ir.Node, ranks []int) (in [][]int, out []int, err error) {
	eq, err := einsumEquationOf(n)
	if err != nil {
		return nil, nil, err
	}
	b, err := eq.bind(ranks)
	if err != nil {
		return nil, nil, n.Errorf("%w", err)
	}
	if !b.outKnown || slices.ContainsFunc(b.in, func(ids []int) bool { return ids == nil }) {
		return nil, nil, n.Errorf("input ranks are not known")
	}
	return b.in, b.out, nil
}

// einsumEquationOf reads and parses the node's equation attribute.
func einsumEquationOf(n *ir.Node) (*einsumEquation, error) {
	if n.Attr("equation") == nil {
		return nil, n.Errorf("attribute equation is required")
	}
	s, err := n.AttrString("equation", "")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	eq, err := parseEinsum(s)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return eq, nil
}

// einsumPlan is an equation bound to concrete input shapes.
type einsumPlan struct {
	// labels are the label ids in use: the output's, in output order, then
	// the summed ones; sizes are their sizes.
	labels []int
	sizes  []int
	nOut   int
	// strides[k][i] is input k's element stride along labels[i]: 0 where
	// the input lacks the label or broadcasts it, the sum of its dims'
	// strides where the label repeats (a diagonal).
	strides [][]int
	// in are the label ids of each input's dims.
	in       [][]int
	outShape []int
	// broadcast is set when some input broadcasts a label (a dim of size 1
	// against a larger size); repeated is set when a label repeats within
	// a term.
	broadcast, repeated bool
}

// planEinsum binds eq to the inputs' shapes.
func planEinsum(eq *einsumEquation, shapes [][]int) (*einsumPlan, error) {
	ranks := make([]int, len(shapes))
	for k, s := range shapes {
		ranks[k] = len(s)
	}
	b, err := eq.bind(ranks)
	if err != nil {
		return nil, err
	}
	p := &einsumPlan{in: b.in}
	size := map[int]int{}
	for k, ids := range b.in {
		inTerm := map[int]int{}
		for pos, id := range ids {
			d := shapes[k][pos]
			if prev, ok := inTerm[id]; ok {
				if prev != d {
					return nil, fmt.Errorf("label %s of input %d has sizes %d and %d", einsumLabelName(id), k, prev, d)
				}
				p.repeated = true
				continue
			}
			inTerm[id] = d
			s, ok := size[id]
			switch {
			case !ok || s == 1:
				if ok && d != 1 {
					p.broadcast = true
				}
				size[id] = d
			case d == s:
			case d == 1:
				p.broadcast = true
			default:
				return nil, fmt.Errorf("label %s has sizes %d and %d, which do not broadcast", einsumLabelName(id), s, d)
			}
		}
	}
	p.labels = append(p.labels, b.out...)
	p.nOut = len(b.out)
	var summed []int
	for id := range size {
		if !slices.Contains(b.out, id) {
			summed = append(summed, id)
		}
	}
	slices.Sort(summed)
	p.labels = append(p.labels, summed...)
	pos := map[int]int{}
	p.sizes = make([]int, len(p.labels))
	for i, id := range p.labels {
		pos[id] = i
		p.sizes[i] = size[id]
	}
	p.outShape = slices.Clone(p.sizes[:p.nOut])
	p.strides = make([][]int, len(shapes))
	for k, ids := range b.in {
		st := make([]int, len(p.labels))
		cs := contiguousStrides(shapes[k])
		for d, id := range ids {
			if shapes[k][d] != 1 {
				st[pos[id]] += cs[d]
			}
		}
		p.strides[k] = st
	}
	return p, nil
}

func runEinsum(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	p, dt, err := planEinsumNode(n, in)
	if err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, dt, p.outShape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	if err := einsumInto(ctx, n, p, in, out); err != nil {
		return nil, err
	}
	return []*ir.Tensor{out}, nil
}

func runEinsumInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	p, dt, err := planEinsumNode(n, in)
	if err != nil {
		return err
	}
	if err := checkIntoOutput(n, out, dt, p.outShape); err != nil {
		return err
	}
	return einsumInto(ctx, n, p, in, out[0])
}

// planEinsumNode validates Einsum's inputs and plans the computation.
func planEinsumNode(n *ir.Node, in []*ir.Tensor) (*einsumPlan, ir.DType, error) {
	if err := checkComputeInputs(n, in, max(1, len(in))); err != nil {
		return nil, 0, err
	}
	dt, err := sameTensorTypes(n, in)
	if err != nil {
		return nil, 0, err
	}
	if err := checkComputeDType(n, "input", dt, NumericTypes); err != nil {
		return nil, 0, err
	}
	eq, err := einsumEquationOf(n)
	if err != nil {
		return nil, 0, err
	}
	shapes := make([][]int, len(in))
	for k, t := range in {
		shapes[k] = t.Shape
	}
	p, err := planEinsum(eq, shapes)
	if err != nil {
		return nil, 0, n.Errorf("%w", err)
	}
	if _, err := checkedElements(p.outShape); err != nil {
		return nil, 0, n.Errorf("%w", err)
	}
	return p, dt, nil
}

// einsumInto computes the planned product into out (every element written).
func einsumInto(ctx *Context, n *ir.Node, p *einsumPlan, in []*ir.Tensor, out *ir.Tensor) error {
	if g, ok := p.gemm(); ok && (out.DType == ir.Float || out.DType == ir.Float16 || out.DType == ir.Double) {
		if err := einsumGemmInto(ctx, g, in[0], in[1], out); err != nil {
			return n.Errorf("%w", err)
		}
		return nil
	}
	if out.DType.IsFloat() {
		ins := make([][]float64, len(in))
		for k, t := range in {
			v, err := toFloat64s(t)
			if err != nil {
				return n.Errorf("input %d: %w", k, err)
			}
			ins[k] = v
		}
		acc := make([]float64, out.Len())
		einsumLoop(p, ins, acc)
		switch o := out.Data.(type) {
		case []float32:
			for i, v := range acc {
				o[i] = float32(v)
			}
		case []float64:
			copy(o, acc)
		case []uint16:
			for i, v := range acc {
				o[i] = ir.Float32ToFloat16(float32(v))
			}
		}
		return nil
	}
	ins := make([][]int64, len(in))
	for k, t := range in {
		v, err := t.AsInt64s()
		if err != nil {
			return n.Errorf("input %d: %w", k, err)
		}
		ins[k] = v
	}
	acc := make([]int64, out.Len())
	einsumLoop(p, ins, acc)
	switch o := out.Data.(type) {
	case []int8:
		narrowInts(o, acc)
	case []int16:
		narrowInts(o, acc)
	case []int32:
		narrowInts(o, acc)
	case []int64:
		copy(o, acc)
	case []uint8:
		narrowInts(o, acc)
	case []uint16:
		narrowInts(o, acc)
	case []uint32:
		narrowInts(o, acc)
	case []uint64:
		narrowInts(o, acc)
	default:
		return n.Errorf("unsupported element type %v", out.DType)
	}
	return nil
}

// narrowInts converts int64 accumulators to the output type, wrapping.
func narrowInts[T intElem](o []T, acc []int64) {
	for i, v := range acc {
		o[i] = T(v)
	}
}

// widenHalf returns a float16 tensor as a float32 one.
func widenHalf(t *ir.Tensor) *ir.Tensor {
	return &ir.Tensor{DType: ir.Float, Shape: t.Shape, Data: halfToFloat32s(t.Data.([]uint16))}
}

// einsumLoop is the reference kernel: it walks every combination of the
// plan's labels, output labels outermost, and sums the products of the
// inputs' elements into out (one element per output label combination).
func einsumLoop[A float64 | int64](p *einsumPlan, ins [][]A, out []A) {
	total := 1
	for _, s := range p.sizes {
		total *= s
	}
	if total == 0 {
		clear(out)
		return
	}
	sumCount := total / len(out)
	nl := len(p.labels)
	idx := make([]int, nl)
	offs := make([]int, len(ins))
	var acc A
	oi := 0
	for it := 0; it < total; it++ {
		prod := A(1)
		for k, x := range ins {
			prod *= x[offs[k]]
		}
		acc += prod
		if (it+1)%sumCount == 0 {
			out[oi] = acc
			oi++
			acc = 0
		}
		for d := nl - 1; d >= 0; d-- {
			idx[d]++
			for k := range offs {
				offs[k] += p.strides[k][d]
			}
			if idx[d] < p.sizes[d] {
				break
			}
			for k := range offs {
				offs[k] -= p.strides[k][d] * p.sizes[d]
			}
			idx[d] = 0
		}
	}
}

// einsumGemmInto runs a batched-GEMM plan on float32 (blas.Sgemm), float16
// (widened to float32) or float64 (blas.Dgemm) inputs.
func einsumGemmInto(ctx *Context, g *einsumGemmPlan, a, b, out *ir.Tensor) error {
	sgemm := func(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		blas.SgemmThreads(computeThreads(ctx), ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
	}
	switch out.DType {
	case ir.Float:
		return einsumGemm(ctx, g, a, b, out, sgemm)
	case ir.Float16:
		o := ir.NewTensor(ir.Float, out.Shape)
		if err := einsumGemm(ctx, g, widenHalf(a), widenHalf(b), o, sgemm); err != nil {
			return err
		}
		float32ToHalf(out.Data.([]uint16), o.Float32s())
		return nil
	case ir.Double:
		return einsumGemm(ctx, g, a, b, out, func(ta, tb bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
			blas.Dgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
		})
	}
	return fmt.Errorf("no GEMM kernel for %v", out.DType)
}

// einsumGemmPlan is a two-input contraction as batched GEMM: the label ids
// of the batch, m, n and k groups, in the order the kernel lays them out.
type einsumGemmPlan struct {
	batch, m, n, k []int
	nb, nm, nn, nk int // the groups' element counts
	p              *einsumPlan
}

// gemm reports whether the plan is a batched GEMM and groups its labels.
func (p *einsumPlan) gemm() (*einsumGemmPlan, bool) {
	if len(p.in) != 2 || p.broadcast || p.repeated {
		return nil, false
	}
	for _, s := range p.sizes {
		if s == 0 {
			return nil, false
		}
	}
	g := &einsumGemmPlan{nb: 1, nm: 1, nn: 1, nk: 1, p: p}
	size := map[int]int{}
	for i, id := range p.labels {
		size[id] = p.sizes[i]
	}
	a, b, out := p.in[0], p.in[1], p.labels[:p.nOut]
	for _, id := range out {
		inA, inB := slices.Contains(a, id), slices.Contains(b, id)
		switch {
		case inA && inB:
			g.batch, g.nb = append(g.batch, id), g.nb*size[id]
		case inA:
			g.m, g.nm = append(g.m, id), g.nm*size[id]
		default:
			g.n, g.nn = append(g.n, id), g.nn*size[id]
		}
	}
	for _, id := range a {
		if slices.Contains(out, id) {
			continue
		}
		if !slices.Contains(b, id) {
			return nil, false // summed within one input
		}
		g.k, g.nk = append(g.k, id), g.nk*size[id]
	}
	for _, id := range b {
		if !slices.Contains(out, id) && !slices.Contains(a, id) {
			return nil, false
		}
	}
	return g, true
}

// einsumGemmOperand returns t's data laid out as first+second+third (each a
// list of label ids) with trans false, or as first+third+second with trans
// true when t already is, or a transposed copy laid out as
// first+second+third.
func einsumGemmOperand[T float32 | float64](ctx *Context, t *ir.Tensor, labels, first, second, third []int) ([]T, bool, error) {
	want := slices.Concat(first, second, third)
	if slices.Equal(labels, want) {
		return t.Data.([]T), false, nil
	}
	if slices.Equal(labels, slices.Concat(first, third, second)) {
		return t.Data.([]T), true, nil
	}
	perm := make([]int, len(want))
	shape := make([]int, len(want))
	for i, id := range want {
		perm[i] = slices.Index(labels, id)
		shape[i] = t.Shape[perm[i]]
	}
	dst := &ir.Tensor{DType: t.DType, Shape: shape, Data: einsumScratch[T](ctx, t.Len())}
	if err := TransposeInto(ctx, dst, t, perm); err != nil {
		return nil, false, err
	}
	return dst.Data.([]T), false, nil
}

// einsumScratch returns n elements of working memory: the context's
// scratch for float32, a new slice for float64.
func einsumScratch[T float32 | float64](ctx *Context, n int) []T {
	var z T
	if _, ok := any(z).(float32); ok {
		return any(ctx.ScratchFloats(n)).([]T)
	}
	return make([]T, n)
}

// einsumGemm runs a batched-GEMM plan: out = a·b per batch, with gemm
// computing C = op(A)·op(B) for row-major matrices.
func einsumGemm[T float32 | float64](ctx *Context, g *einsumGemmPlan, a, b, out *ir.Tensor,
	gemm func(ta, tb bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int)) error {
	av, ta, err := einsumGemmOperand[T](ctx, a, g.p.in[0], g.batch, g.m, g.k)
	if err != nil {
		return err
	}
	bv, tb, err := einsumGemmOperand[T](ctx, b, g.p.in[1], g.batch, g.k, g.n)
	if err != nil {
		return err
	}
	outLabels := g.p.labels[:g.p.nOut]
	natural := slices.Concat(g.batch, g.m, g.n)
	cv := out.Data.([]T)
	if !slices.Equal(outLabels, natural) {
		cv = einsumScratch[T](ctx, out.Len())
	}
	m, n, k := g.nm, g.nn, g.nk
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	for i := 0; i < g.nb; i++ {
		gemm(ta, tb, m, n, k, av[i*m*k:(i+1)*m*k], lda, bv[i*k*n:(i+1)*k*n], ldb, cv[i*m*n:(i+1)*m*n], n)
	}
	if slices.Equal(outLabels, natural) {
		return nil
	}
	// cv holds the output as batch+m+n; permute it into the output order.
	shape := make([]int, len(natural))
	for i, id := range natural {
		shape[i] = g.p.sizes[slices.Index(g.p.labels, id)]
	}
	perm := make([]int, len(outLabels))
	for i, id := range outLabels {
		perm[i] = slices.Index(natural, id)
	}
	return TransposeInto(ctx, out, &ir.Tensor{DType: out.DType, Shape: shape, Data: cv}, perm)
}
