package graph

import (
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Position biases that depend only on the distance between query and key.
//
// T5's relative position bias is a learned table of num_buckets × H
// values, gathered by a bucket that depends only on j − i:
// Gather(tableᵀ, buckets, axis=1), [H, S, S], after gatherTransposed. The fused attention read it as a bias of H·S² floats:
// at S=2048 with 12 heads, 200 MB written by the Gather and read again by
// the attention on every call, and a bias the fast path's kernel did not
// take. The same values are the bias's S_q + S_k − 1 diagonals a head.
//
// diagonalBiases runs after the attention fusion. For each fused node whose
// bias (input 5; or its additive mask, when it has no bias) holds more
// than two distinct values (a mask holds 0 and its fills, and the fusion
// has given it its best form already) and is one of
//   - a plan constant (T5's bias folded, below 4Mi elements), or
//   - Gather(T, I, axis=1) with T a constant [H, n] and I a constant or
//     evaluated [S_q, S_k] index tensor (T5's from 1024 tokens on),
//
// read through no-op steps and Reshapes that keep its last two dims
// (regroupsBatch), it checks element by element that each [S_q, S_k] matrix is
// constant along its diagonals (for the Gather, that I is), and gives the
// fused node the diagonals as a plan constant with bias_diagonals = 1. The
// steps that computed the full bias, which nothing reads any more, are
// dropped from the plan and listed as absorbed by the fusion.
func (p *Program) diagonalBiases(pl *plan, types map[string]ops.Value) {
	f := newFuser(p, pl, types)
	absorbed := map[*ir.Node]int{}
	changed := false
	for k, fu := range pl.fusions {
		n := fu.Node
		if n == nil || n.OpType != ops.FusedAttentionOp || n.Domain != ops.DomainAttnrun {
			continue
		}
		if d, _ := n.AttrInt("bias_diagonals", 0); d != 0 {
			continue
		}
		i, ok := f.producer[n.Outputs[0]]
		if !ok || pl.steps[i].node != n {
			continue
		}
		input, trial := diagonalCandidate(n)
		if trial == nil {
			continue
		}
		x := n.Inputs[input]
		d, chain := f.biasDiagonals(x)
		if d == nil {
			continue
		}
		name := x + "/diagonals"
		if _, ok := types[name]; !ok { // the first fusion to read x
			types[name] = ops.Value{Type: ops.Known(d.DType, d.Shape), Const: d}
			for _, c := range chain {
				absorbed[c] = k
			}
		}
		trial.Inputs[5] = name
		trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: "bias_diagonals", Type: ir.AttrInt, Int: 1})
		if !f.sameOutputs(trial, n, func(s string) (ops.Value, bool) { v, ok := types[s]; return v, ok }) {
			continue
		}
		st := &pl.steps[i]
		for len(st.args) < 6 {
			st.args = append(st.args, -1)
		}
		st.args[input] = -1
		st.args[5] = f.slotOf(name)
		pl.consts[st.args[5]] = types[name].Const
		*n = *trial // the fusion and the step share the node
		changed = true
	}
	if changed {
		p.dropDead(pl, absorbed)
	}
}

// diagonalCandidate returns which input of fused node n a bias by its
// diagonals could replace (5, the bias; or 3, an additive mask that can
// become the bias: no bias, no padded keys), with a copy of n of six
// inputs that takes it as its bias, whose input 5 the caller sets; nil
// when neither.
func diagonalCandidate(n *ir.Node) (int, *ir.Node) {
	trial := *n
	trial.Inputs = append([]string{}, n.Inputs...)
	trial.Attrs = append([]*ir.Attribute{}, n.Attrs...)
	if len(n.Inputs) > 5 && n.Inputs[5] != "" {
		return 5, &trial
	}
	kind, _ := n.AttrString("mask_kind", "")
	pad, _ := n.AttrInt("mask_pad_keys", 0)
	if len(n.Inputs) < 4 || n.Inputs[3] == "" || kind != ops.MaskAdditive || pad != 0 {
		return 0, nil
	}
	scale, err := n.AttrFloat("mask_scale", 1)
	if err != nil {
		return 0, nil
	}
	// The additive mask becomes the bias: scores + mask_scale·mask is
	// scores + bias_scale·bias.
	for len(trial.Inputs) < 6 {
		trial.Inputs = append(trial.Inputs, "")
	}
	trial.Inputs[3] = ""
	trial.Attrs = trial.Attrs[:0]
	for _, a := range n.Attrs {
		if a.Name != "mask_kind" && a.Name != "mask_scale" && a.Name != "mask_fill" && a.Name != "bias_scale" && a.Name != "bias_first" {
			trial.Attrs = append(trial.Attrs, a)
		}
	}
	trial.Attrs = append(trial.Attrs, &ir.Attribute{Name: "bias_scale", Type: ir.AttrFloat, Float: scale})
	return 3, &trial
}

// diagonalsOf is what biasDiagonals found for a tensor.
type diagonalsOf struct {
	t     *ir.Tensor
	chain []*ir.Node
}

// biasDiagonals returns the diagonals of float32 tensor x, of concrete shape
// [..., Sq, Sk] with Sq, Sk ≥ 2, as a tensor of shape [..., Sq + Sk − 1]
// (element i − j + Sk − 1 of a matrix's row is its (i, j)), when every
// matrix of x is constant along its diagonals and they hold more than two
// distinct values: x a plan constant or a Gather of a constant table by
// constant indices, through steps that keep its last two dims; with the
// nodes of those steps. nil when not. The answer is kept for the plan's
// later passes (the fusion asks first, positionBias).
func (f *fuser) biasDiagonals(x string) (*ir.Tensor, []*ir.Node) {
	if d, ok := f.evals.diagonals[x]; ok {
		return d.t, d.chain
	}
	t, chain := f.findDiagonals(x)
	if t == nil || !manyValues(t.Float32s()) {
		t, chain = nil, nil
	}
	if f.evals.diagonals == nil {
		f.evals.diagonals = map[string]diagonalsOf{}
	}
	f.evals.diagonals[x] = diagonalsOf{t, chain}
	return t, chain
}

// findDiagonals is biasDiagonals without the count of values or the memo.
func (f *fuser) findDiagonals(x string) (*ir.Tensor, []*ir.Node) {
	shape, ok := f.types[x].Type.Shape.Concrete()
	if !ok || len(shape) < 2 || f.types[x].Type.DType != ir.Float {
		return nil, nil
	}
	r := len(shape)
	sq, sk := shape[r-2], shape[r-1]
	if sq < 2 || sk < 2 {
		return nil, nil // nothing to gain: as many diagonals as values
	}
	out := append(append([]int{}, shape[:r-2]...), sq+sk-1)
	var chain []*ir.Node
	for name := x; ; {
		if f.types[name].Const != nil {
			c := f.constValue(name)
			if c == nil || c.DType != ir.Float {
				return nil, nil
			}
			d := matrixDiagonals(c.Float32s(), sq, sk)
			if d == nil {
				return nil, nil
			}
			return ir.FromSlice(out, d), chain
		}
		n, ok := f.producerNode(name)
		if !ok {
			return nil, nil
		}
		chain = append(chain, n)
		if n.OpType == "Gather" {
			d := f.gatheredDiagonals(n, sq, sk)
			if d == nil {
				return nil, nil
			}
			return ir.FromSlice(out, d), chain
		}
		if !f.noOp(n) && !f.regroupsBatch(n) {
			return nil, nil
		}
		name = n.Inputs[0]
	}
}

// gatheredDiagonals returns the diagonals of Gather node g's [H, sq, sk]
// output, H of them, when g gathers along axis 1 of a constant float32
// table [H, n] with a constant (or evaluated) [sq, sk] index tensor that
// is constant along its diagonals and in range; nil otherwise.
func (f *fuser) gatheredDiagonals(g *ir.Node, sq, sk int) []float32 {
	axis, err := g.AttrInt("axis", 0)
	if err != nil || len(g.Inputs) != 2 || (axis != 1 && axis != -1) {
		return nil
	}
	table := f.constValue(g.Inputs[0])
	if table == nil || table.DType != ir.Float || table.Rank() != 2 {
		return nil
	}
	idx, _ := f.constOrEvaluated(g.Inputs[1])
	if idx == nil || idx.Rank() != 2 || idx.Shape[0] != sq || idx.Shape[1] != sk {
		return nil
	}
	if idx.DType != ir.Int64 && idx.DType != ir.Int32 {
		return nil
	}
	at, err := idx.AsInt64s()
	if err != nil {
		return nil
	}
	diag := matrixDiagonals(at, sq, sk)
	if diag == nil {
		return nil
	}
	h, cols := table.Shape[0], table.Shape[1]
	vals := table.Float32s()
	out := make([]float32, h*len(diag))
	for u, b := range diag {
		if b < 0 {
			b += int64(cols) // ONNX Gather counts negative indices from the end
		}
		if b < 0 || b >= int64(cols) {
			return nil // the Gather step reports it when it runs
		}
		for r := 0; r < h; r++ {
			out[r*len(diag)+u] = vals[r*cols+int(b)]
		}
	}
	return out
}

// matrixDiagonals returns the diagonals of each [sq, sk] matrix of data
// (laid out one after another), element i − j + sk − 1 of a matrix's
// Sq + Sk − 1 being its (i, j), when every matrix is constant along its
// diagonals; nil otherwise. NaNs never compare equal, so a matrix holding
// one is not taken.
func matrixDiagonals[T float32 | int64](data []T, sq, sk int) []T {
	n := sq + sk - 1
	mats := len(data) / (sq * sk)
	out := make([]T, mats*n)
	for m := 0; m < mats; m++ {
		a := data[m*sq*sk : (m+1)*sq*sk]
		d := out[m*n : (m+1)*n]
		for j := 0; j < sk; j++ {
			d[sk-1-j] = a[j] // row 0: i − j = −j
		}
		for i := 1; i < sq; i++ {
			d[sk-1+i] = a[i*sk] // column 0: i − j = i
		}
		for i := 1; i < sq; i++ {
			row := a[i*sk : (i+1)*sk]
			diag := d[i : i+sk] // row i's terms, for j = sk−1 down to 0
			for j, v := range row {
				if v != diag[sk-1-j] {
					return nil
				}
			}
		}
	}
	return out
}

// manyValues reports whether xs holds more than two distinct values.
func manyValues(xs []float32) bool {
	var seen []float32
	for _, x := range xs {
		if !slices.Contains(seen, x) {
			if seen = append(seen, x); len(seen) > 2 {
				return true
			}
		}
	}
	return false
}
