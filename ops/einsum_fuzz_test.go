package ops

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// FuzzEinsum feeds Einsum random equations over one or two small inputs of
// random shapes: inference and the kernel must return an error or a result,
// never panic, and a result must have the shape inference gave.
func FuzzEinsum(f *testing.F) {
	for _, eq := range []string{"bhqd,bhkd->bhqk", "bij,bjk->bik", "ii->i", "...ij,...jk", "i,i", "ij->", "a...b,b...->a...", "Ab,bA->A", " i j , j k -> i k ", "...->...", "i,j->ij", "ii,i->"} {
		f.Add(eq, int64(1), uint8(2))
	}
	f.Fuzz(func(t *testing.T, eq string, seed int64, inputs uint8) {
		if len(eq) > 64 {
			return
		}
		r := rand.New(rand.NewSource(seed))
		nIn := 1 + int(inputs%2)
		in := make([]*ir.Tensor, nIn)
		vals := make([]Value, nIn)
		for i := range in {
			shape := make([]int, r.Intn(5))
			for d := range shape {
				shape[d] = 1 + r.Intn(3)
			}
			x := ir.NewTensor(ir.Float, shape)
			for k, xs := 0, x.Float32s(); k < len(xs); k++ {
				xs[k] = float32(r.Intn(5))
			}
			in[i], vals[i] = x, Value{Type: Known(ir.Float, shape)}
		}
		n := cNode("Einsum", nIn, 1, &ir.Attribute{Name: "equation", Type: ir.AttrString, String: []byte(eq)})
		outs, err := inferEinsum(n, 17, vals)
		if err != nil {
			return
		}
		res, err := runEinsum(&Context{Opset: 17, Threads: 2}, n, in)
		if err != nil {
			t.Fatalf("%q on %v: inference accepted it, the kernel said %v", eq, shapesOf(in), err)
		}
		want, _ := outs[0].Type.Shape.Concrete()
		if !slices.Equal(res[0].Shape, want) {
			t.Fatalf("%q on %v: shape %v, inference said %v", eq, shapesOf(in), res[0].Shape, want)
		}
	})
}

func shapesOf(ts []*ir.Tensor) [][]int {
	s := make([][]int, len(ts))
	for i, t := range ts {
		s[i] = t.Shape
	}
	return s
}
