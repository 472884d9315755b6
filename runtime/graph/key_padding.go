package graph

import (
	"math"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Padding tests that read the causal mask.
//
// transformers' _update_causal_mask (LLaMA, Mistral, Qwen2; 4.38 to 4.44)
// finds the padded keys with a test over the whole [B, 1, S, S] causal
// mask C, whose elements are 0 (kept) and finfo.min (hidden):
//
//	padding = (C + attention_mask[:, None, None, :]) == 0
//	mask    = C.masked_fill(padding, finfo.min)
//
// which exports as Where(Equal(Add(C, Cast(am)), 0), F, D), D being C
// again (another Slice of it). Where C is finfo.min the sum is never 0
// and the Where passes D on, which is F there; where C is 0 the test is
// am == 0. So the mask is Where(Equal(Cast(am), 0), F, D): a per-key
// test, of S elements a batch instead of S², and the form the causal cut
// splits (fuse_causal.go: the fused node takes the causal part as its
// cut and the per-key test as its mask).
//
// narrowPaddingTests rewrites a Where(Equal(Add(C, P), 0), F, D), through
// steps that pass the condition on unchanged, to Where(Equal(P, 0), F, D) when
//   - P is a Cast to float32 of an integer or bool tensor (|P| < 2^64),
//     read by the Add along the broadcast (the Add's output has C's
//     shape);
//   - C and D are plan constants or computed from constants alone
//     (evalShapeOnly), with the Where's output shape, and F is one value;
//   - every element of C is 0 (or -0), or at least 2^66 in magnitude and
//     then D there is F (C + P is then never 0; the Where passes D on).
//
// The result is the same bit for bit: where C is 0, C + P == 0 iff P ==
// 0. It runs at plan time, before the fusions (not with Options.NoFuse);
// the steps that computed the full test (the Add, the Equal's old input,
// the Casts) are dropped once nothing reads them.
func (p *Program) narrowPaddingTests(pl *plan, types map[string]ops.Value) {
	f := newFuser(p, pl, types)
	changed := false
	for i := range pl.steps {
		w := &pl.steps[i]
		n := w.node
		if n.OpType != "Where" || !isDefaultDomain(n) || len(n.Inputs) != 3 || len(n.Outputs) != 1 {
			continue
		}
		eq, sum, zero, ok := f.paddingTest(n.Inputs[0])
		if !ok {
			continue
		}
		a := f.pl.steps[f.producer[sum]].node
		for _, o := range [][2]string{{a.Inputs[0], a.Inputs[1]}, {a.Inputs[1], a.Inputs[0]}} {
			c, pad := o[0], o[1]
			if !f.intCast(pad) || !f.sameShape(c, sum) || !f.sameShape(c, n.Outputs[0]) || !f.sameShape(n.Inputs[2], n.Outputs[0]) {
				continue
			}
			fill, ok := f.sameConst(n.Inputs[1])
			if !ok || !f.causalTerm(c, n.Inputs[2], fill) {
				continue
			}
			if f.narrowTest(eq, w, pad, zero) {
				changed = true
				break
			}
		}
	}
	if changed {
		p.dropDead(pl, nil) // the Adds and full tests nothing reads any more
	}
}

// paddingTestLimit is the least magnitude of a causal mask's hidden value
// for which C + P is never 0 with P a float32 Cast of an integer (|P| ≤
// 2^64).
const paddingTestLimit = 0x1p66

// paddingTest follows a Where's bool condition back through steps that
// pass it on unchanged (passThrough) to an Equal(sum, 0) or Equal(0, sum)
// step (returned as eq, with zero its zero operand), sum a float32 Add's
// output; every tensor on the way has no other reader.
func (f *fuser) paddingTest(cond string) (eq int, sum, zero string, ok bool) {
	n, steps, ok := f.linkSource(f.passThrough(cond, false))
	if !ok || n.OpType != "Equal" || len(n.Inputs) != 2 {
		return 0, "", "", false
	}
	for _, o := range [][2]string{{n.Inputs[0], n.Inputs[1]}, {n.Inputs[1], n.Inputs[0]}} {
		z, isScalar := f.scalarConst(o[1])
		if !isScalar || z != 0 || !f.isFloat32(o[0]) {
			continue
		}
		if _, a, ok := f.internal(o[0]); ok && a.OpType == "Add" && len(a.Inputs) == 2 {
			return steps[len(steps)-1], o[0], o[1], true
		}
	}
	return 0, "", "", false
}

// intCast reports whether tensor name is a Cast to float32 of an integer
// or bool tensor.
func (f *fuser) intCast(name string) bool {
	k, ok := f.producer[name]
	if !ok || f.removed[k] {
		return false
	}
	n := f.pl.steps[k].node
	if n.OpType != "Cast" || !isDefaultDomain(n) || len(n.Inputs) != 1 || !f.isFloat32(name) {
		return false
	}
	dt := f.types[n.Inputs[0]].Type.DType
	return dt == ir.Bool || dt.IsInt()
}

// sameShape reports whether tensors a and b have the same concrete shape.
func (f *fuser) sameShape(a, b string) bool {
	as, ok1 := f.concreteShape(a)
	bs, ok2 := f.concreteShape(b)
	return ok1 && ok2 && slices.Equal(as, bs)
}

// causalTerm reports whether float32 tensors c and d, of one shape, are
// known at plan time with every element of c 0, or at least
// paddingTestLimit in magnitude where d is fill.
func (f *fuser) causalTerm(c, d string, fill float64) bool {
	if !f.isFloat32(c) || !f.isFloat32(d) {
		return false
	}
	cv, _ := f.constOrEvaluated(c)
	if cv == nil {
		return false
	}
	dv, _ := f.constOrEvaluated(d)
	if dv == nil || cv.Len() != dv.Len() {
		return false
	}
	fv := float32(fill)
	ds := dv.Float32s()
	for i, e := range cv.Float32s() {
		if e != 0 && !(math.Abs(float64(e)) >= paddingTestLimit && ds[i] == fv) {
			return false
		}
	}
	return true
}

// narrowTest rewrites Equal step eq to test pad against zero, under a new
// output name, and Where step w to read it as its condition, when both
// then infer their types as before (w its output's, eq a bool that
// broadcasts within w's).
func (f *fuser) narrowTest(eq int, w *step, pad, zero string) bool {
	e := &f.pl.steps[eq]
	trial := cloneNode(e.node)
	trial.Inputs = []string{pad, zero}
	trial.Outputs = []string{e.node.Outputs[0] + "/per_key"}
	res, err := e.schema.Infer(trial, e.ctx.Opset, []ops.Value{f.types[pad], f.types[zero]})
	if err != nil || len(res) != 1 || res[0].Type.DType != ir.Bool {
		return false
	}
	wTrial := cloneNode(w.node)
	wTrial.Inputs[0] = trial.Outputs[0]
	in := []ops.Value{res[0], f.types[wTrial.Inputs[1]], f.types[wTrial.Inputs[2]]}
	out, err := w.schema.Infer(wTrial, w.ctx.Opset, in)
	if err != nil || len(out) != 1 || !sameType(out[0].Type, f.types[w.node.Outputs[0]].Type) {
		return false
	}
	f.types[trial.Outputs[0]] = ops.Value{Type: res[0].Type}
	f.producer[trial.Outputs[0]], f.uses[trial.Outputs[0]] = eq, 1
	f.uses[pad]++
	for _, name := range []string{e.node.Inputs[0], e.node.Inputs[1], w.node.Inputs[0]} {
		f.uses[name]--
	}
	f.uses[zero]++
	e.node, e.args = trial, []int{f.slotOf(pad), f.slotOf(zero)}
	e.outs, e.want = []int{f.slotOf(trial.Outputs[0])}, []ir.TypeInfo{res[0].Type}
	if c := f.types[zero].Const; c != nil {
		f.pl.consts[e.args[1]] = c
	}
	w.node, w.args = wTrial, slices.Clone(w.args)
	w.args[0] = e.outs[0]
	return true
}
