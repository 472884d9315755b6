package graph

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// hostileFusedMatMul is a model whose own node is a com.attnrun:FusedMatMul
// reading A through a view whose strides overflow int64 when multiplied
// out: the view "fits" the 16-element input only if the bounds check
// wraps around.
func hostileFusedMatMul() *ir.Model {
	big := int64(math.MaxInt32) * int64(math.MaxInt32)
	g := &ir.Graph{
		Name: "hostile",
		Inputs: []*ir.ValueInfo{
			{Name: "a", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{4, 4})}},
			{Name: "b", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.ShapeOf([]int{2, 2})}},
		},
		Outputs: []*ir.ValueInfo{{Name: "y", Type: ir.TypeInfo{DType: ir.Float}}},
		Nodes: []*ir.Node{{
			Name: "evil", OpType: ops.FusedMatMulOp, Domain: ops.DomainAttnrun,
			Inputs: []string{"a", "b"}, Outputs: []string{"y"},
			Attrs: []*ir.Attribute{{Name: "a_view", Type: ir.AttrInts, Ints: []int64{0, 2, 2, 2, big, big, big}}},
		}},
		Initializers: map[string]*ir.Tensor{},
	}
	return &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17, ops.DomainAttnrun: 1}, Graph: g}
}

// TestUserModelsCannotUseInternalOps: the com.attnrun domain is refused in
// a user's model, with one error naming the node; and should a caller allow
// it, the view is still checked without overflow, so the run is an error,
// not an out-of-range access.
func TestUserModelsCannotUseInternalOps(t *testing.T) {
	m := hostileFusedMatMul()
	_, err := Compile(m, Options{})
	if err == nil || !strings.Contains(err.Error(), `node "evil" (com.attnrun:FusedMatMul): the com.attnrun domain holds attnrun's internal ops`) {
		t.Fatalf("Compile: err = %v, want the domain refused", err)
	}
	p, err := Compile(m, Options{AllowInternalOps: true})
	if err != nil {
		if !strings.Contains(err.Error(), "does not fit") {
			t.Fatalf("Compile with internal ops: %v", err)
		}
		return
	}
	in := map[string]*ir.Tensor{"a": ir.NewTensor(ir.Float, []int{4, 4}), "b": ir.NewTensor(ir.Float, []int{2, 2})}
	_, err = p.Run(context.Background(), in, RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not fit") || strings.Contains(err.Error(), "internal error") {
		t.Fatalf("Run: err = %v, want the view refused as not fitting", err)
	}
}
