package graph

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// Column stripes of fused projections.
//
// A fused QKV projection (nn.MultiheadAttention's in_proj, GPT-2's c_attn,
// timm's qkv) writes [Q | K | V] in one row, each part heads·head size
// wide, and the FusedAttention after it reads the three parts through head
// views. Its workers take ranges of heads (ops' headGroups), so the
// projection's GEMM should give each of its workers the same heads'
// columns of Q, of K and of V, not one contiguous half of the row: then
// each core reads the lines it has just written. markStripes tells the
// FusedMatMul so, with its column_stripe attribute (ops.ColumnStripeAttr);
// it changes the schedule only, never a value.

// markStripes sets column_stripe on every FusedMatMul step this plan made
// whose output a FusedAttention step reads, through its q_view, k_view or
// v_view, as stripes of heads: each view's head axis (the last batch
// axis) spans heads·stride columns, a whole fraction of the row, and all
// views of that output agree.
func (p *Program) markStripes(pl *plan) {
	made := map[*ir.Node]bool{}
	for _, f := range pl.fusions {
		made[f.Node] = true
	}
	producer := map[string]*ir.Node{}
	for _, st := range pl.steps {
		n := st.node
		if made[n] && n.Domain == ops.DomainAttnrun && n.OpType == ops.FusedMatMulOp && len(n.Outputs) == 1 {
			producer[n.Outputs[0]] = n
		}
	}
	stripes := map[*ir.Node]int{} // -1: views disagree
	var order []*ir.Node
	for _, st := range pl.steps {
		n := st.node
		if n.Domain != ops.DomainAttnrun || n.OpType != ops.FusedAttentionOp {
			continue
		}
		for k, attr := range []string{"q_view", "k_view", "v_view"} {
			mm := producer[n.Input(k)]
			if mm == nil {
				continue
			}
			stripe := 0
			if ints, ok, err := n.AttrInts(attr); ok && err == nil {
				if v, err := ops.ParseView(ints); err == nil {
					stripe = headStripe(v, pl.types[n.Input(k)].Type)
				}
			}
			old, seen := stripes[mm]
			switch {
			case !seen:
				order = append(order, mm)
				stripes[mm] = stripe
			case old != stripe:
				stripes[mm] = -1
			}
		}
	}
	for _, mm := range order {
		if s := stripes[mm]; s > 0 {
			mm.Attrs = withAttr(mm.Attrs, &ir.Attribute{Name: ops.ColumnStripeAttr, Type: ir.AttrInt, Int: int64(s)})
		}
	}
}

// headStripe returns the stripe width a head view v (rank ≥ 3, heads on
// axis rank-3) of a tensor of type t reads its heads from: heads·head
// stride, when that is less than t's last dim and divides it (the view
// reads one part of several); else 0.
func headStripe(v ops.View, t ir.TypeInfo) int {
	r := len(v.Shape)
	dims, ok := t.Shape.Concrete()
	if r < 3 || !t.RankKnown || !ok || len(dims) == 0 {
		return 0
	}
	row := dims[len(dims)-1]
	heads, stride := v.Shape[r-3], v.Strides[r-3]
	stripe := heads * stride
	if heads < 2 || stride == 0 || stripe >= row || row%stripe != 0 {
		return 0
	}
	return stripe
}
