package graph

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// symVI declares a float32 input of the given dims; a string dim is a
// dim_param.
func symVI(name string, dims ...any) *ir.ValueInfo {
	shape := make(ir.Shape, len(dims))
	for i, d := range dims {
		switch d := d.(type) {
		case int:
			shape[i] = ir.Dim{Value: int64(d)}
		case string:
			shape[i] = ir.Dim{Param: d}
		}
	}
	return &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: ir.Float, Shape: shape, RankKnown: true}}
}

// TestSharedDimParam: inputs q[S, 4] and k[S, 4] share the dim_param S.
// Compile-time inference takes the two S as one size, so it folds
// width = Shape(Reshape(k, [Shape(q)[0], -1]))[1] to the constant 4 (S·4/S).
// A run with q at 2 rows and k at 3 is refused with StrictDims; otherwise it
// runs, reports the conflict, and computes from the real shapes: k's 12
// elements reshaped to [2, -1] are [2, 6], so width is 6 — not the folded 4.
func TestSharedDimParam(t *testing.T) {
	i64 := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	syn := synth{
		inputs: []*ir.ValueInfo{symVI("q", "S", 4), symVI("k", "S", 4)},
		inits:  map[string]*ir.Tensor{"zero": i64(0), "one": i64(1), "two": i64(2), "minus1": i64(-1)},
		nodes: []*ir.Node{
			node("Shape", []string{"q"}, []string{"qshape"}),
			node("Slice", []string{"qshape", "zero", "one"}, []string{"rows"}),
			node("Concat", []string{"rows", "minus1"}, []string{"target"}, &ir.Attribute{Name: "axis", Type: ir.AttrInt, Int: 0}),
			node("Reshape", []string{"k", "target"}, []string{"kr"}),
			node("Shape", []string{"kr"}, []string{"krshape"}),
			node("Slice", []string{"krshape", "one", "two"}, []string{"width"}),
			node("Relu", []string{"kr"}, []string{"y"}),
		},
		outputs: []string{"width", "y"},
	}
	m := syn.model()
	q := ir.NewTensor(ir.Float, []int{2, 4})
	k := ir.FromSlice([]int{3, 4}, []float32{-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11, 12})
	in := map[string]*ir.Tensor{"q": q, "k": k}

	strict, err := Compile(m, Options{StrictDims: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := strict.Types["width"].Const; c == nil || !slices.Equal(c.Int64s(), []int64{4}) {
		t.Fatalf("compile-time width %v, want the constant [4] this test is about", strict.Types["width"])
	}
	_, err = strict.Run(context.Background(), in, RunOptions{})
	if want := `input "k" dim 0 (S) is 3, but q dim 0 set S=2`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("strict: err = %v, want %q", err, want)
	}

	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	conflicts, err := p.ValidateInputs(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(conflicts) != 1 || conflicts[0].Param != "S" || !slices.Equal(conflicts[0].Bindings, []DimBinding{{"q", 0, 2}, {"k", 0, 3}}) {
		t.Fatalf("conflicts %v, want S bound to 2 by q and 3 by k", conflicts)
	}
	if got := conflicts[0].String(); got != `inputs give dim_param "S" different sizes: "q" dim 0 = 2, "k" dim 0 = 3` {
		t.Errorf("String() = %q", got)
	}
	out, err := p.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := out["width"].Int64s(); !slices.Equal(got, []int64{6}) {
		t.Errorf("width = %v, want [6] (k's 12 elements as [2, -1])", got)
	}
	if y := out["y"]; ir.ShapeString(y.Shape) != "2x6" || !slices.Equal(y.Float32s(), []float32{0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0, 12}) {
		t.Errorf("y = [%s] %v", ir.ShapeString(y.Shape), y.Float32s())
	}
	// Equal sizes keep the compile-time constants and report nothing.
	same := map[string]*ir.Tensor{"q": ir.NewTensor(ir.Float, []int{3, 4}), "k": k}
	if conflicts, err := p.ValidateInputs(same); err != nil || len(conflicts) != 0 {
		t.Fatalf("equal sizes: conflicts %v, err %v", conflicts, err)
	}
	out, err = p.Run(context.Background(), same, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := out["width"].Int64s(); !slices.Equal(got, []int64{4}) {
		t.Errorf("equal sizes: width = %v, want [4]", got)
	}
}

// TestKVCacheLengthSymbolic: a KV cache's length after the Concat of past
// and current keys is the symbol "past + seq", in the primitive LLaMA-style
// export (through repeat_kv's Expand to the attention scores) and through
// the ONNX Attention op's present outputs, instead of an unknown dim.
func TestKVCacheLengthSymbolic(t *testing.T) {
	for _, c := range []struct{ model, tensor, want string }{
		{"llama_attention_opset17", "/Softmax_output_0", "float32[batch, 4, seq, past + seq]"},
		{"llama_attention_opset17", "/Expand_output_0", "float32[batch, 2, 2, past + seq, 16]"},
		{"llama_attention_opset17", "present_key", "float32[batch, 2, past + seq, 16]"},
		{"llama_block_gqa", "present_value", "float32[batch, 2, past + seq, 16]"},
	} {
		_, p := compileModel(t, c.model)
		if got := p.Types[c.tensor].Type.String(); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.model, c.tensor, got, c.want)
		}
	}
}
