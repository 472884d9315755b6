package graph

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Masks computed after a broadcast.
//
// Some exports broadcast a small mask to the full scores shape first and
// only then compute with it. transformers' _expand_mask (BART, mBART,
// Marian, Pegasus, Whisper's decoder, OPT, CLIP's text model) turns an
// attention_mask [B, Sk] into
//
//	m = Expand(mask[:, None, None, :], [B, 1, Sq, Sk])
//	Where(Cast(1 - Cast(m)) → bool, finfo.min, 1 - Cast(m))
//
// so that four element-wise steps run over B·Sq·Sk elements to make what
// is one row per batch item. An element-wise op commutes with broadcasting
// (f(Expand(x)) is Expand(f(x))), so the fused attention reads its mask
// and bias computed before the broadcast instead: narrowMasks clones the
// element-wise steps between the Expand and the mask, each reading the
// narrowed form of its inputs, as steps the fusion runs before its fused
// node; the fused node broadcasts the result as it broadcasts any mask.
// The values are the same bit for bit (the same op on the same elements);
// the full-size steps are then read by nothing and dropped (listed in the
// fusion's Absorbed nodes). A mask whose every input is full-size, or that
// has no Expand before it, is left as it is.

// narrowOps are the element-wise ops a narrowed mask is computed through:
// each output element is the op on the inputs' elements broadcast to it,
// so the op commutes with broadcasting. The gpu backend lowers each of
// them.
var narrowOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true,
	"And": true, "Or": true, "Xor": true, "Not": true,
	"Equal": true, "Less": true, "Greater": true, "LessOrEqual": true, "GreaterOrEqual": true,
	"Sqrt": true, "Erf": true, "Neg": true, "Exp": true, "Tanh": true, "Relu": true,
	"Abs": true, "Reciprocal": true, "Sigmoid": true, "Log": true,
	"Cast": true, "Where": true, "Identity": true,
}

// narrowMasks returns m with each mask and bias that is computed
// element-wise from an Expand replaced by the same computation before the
// broadcast, adding the nodes computing them to added (an earlier
// fusion's are read again, not added twice), and the full-size steps they
// stand for.
func (f *fuser) narrowMasks(m attnMatch, added *addedNodes) (attnMatch, []int) {
	var steps []int
	seen := map[string]string{}
	m.masks = slices.Clone(m.masks)
	for i := range m.masks {
		st := &m.masks[i]
		if st.name == "" {
			continue
		}
		if name, ok := f.narrowed(st.name, added, &steps, seen); ok && f.fitsScores(name, st.at) {
			st.name = name
		}
	}
	return m, steps
}

// narrowed returns the name of tensor t computed before the broadcasts
// feeding it, adding the nodes that compute it to added and the full-size
// steps they stand for to steps; ok is false when that is t itself (no
// Expand before it, or nothing smaller). seen holds the tensors of this
// fusion's masks narrowed so far.
func (f *fuser) narrowed(t string, added *addedNodes, steps *[]int, seen map[string]string) (string, bool) {
	if name, ok := seen[t]; ok {
		return name, name != t
	}
	seen[t] = t
	k, ok := f.producer[t]
	if !ok || f.removed[k] {
		return t, false
	}
	st := f.pl.steps[k]
	n := st.node
	if !isDefaultDomain(n) || len(n.Outputs) != 1 {
		return t, false
	}
	if x, ok := f.expandInput(t); ok {
		*steps = append(*steps, k)
		seen[t] = x
		return x, true
	}
	if !narrowOps[n.OpType] {
		return t, false
	}
	name := ops.AttentionTempPrefix + t + "/narrowed"
	if _, made := f.made[name]; made { // an earlier fusion computes it
		seen[t] = name
		return name, true
	}
	inputs := slices.Clone(n.Inputs)
	changed := false
	for j, in := range inputs {
		if in == "" || f.types[in].Const != nil {
			continue
		}
		if name, ok := f.narrowed(in, added, steps, seen); ok {
			inputs[j], changed = name, true
		}
	}
	if !changed {
		return t, false
	}
	clone := cloneNode(n)
	clone.Name = n.Name + "/narrowed"
	clone.Inputs, clone.Outputs = inputs, []string{name}
	in := make([]ops.Value, len(inputs))
	for j, x := range inputs {
		if x != "" {
			in[j] = f.types[x]
		}
	}
	res, err := st.schema.Infer(clone, st.ctx.Opset, in)
	if err != nil || len(res) != 1 {
		return t, false
	}
	small, ok1 := res[0].Type.Shape.Concrete()
	full, ok2 := f.concreteShape(t)
	if !ok1 || !ok2 || ir.NumElements(small) >= ir.NumElements(full) || res[0].Type.DType != f.types[t].Type.DType {
		return t, false
	}
	f.types[name] = ops.Value{Type: res[0].Type}
	clone.Doc = fmt.Sprintf("%s computed before the broadcast, [%s] instead of [%s]", n.Label(), ir.ShapeString(small), ir.ShapeString(full))
	added.add(false, clone, st.schema, st.ctx.Opset)
	*steps = append(*steps, k)
	seen[t] = name
	return name, true
}
