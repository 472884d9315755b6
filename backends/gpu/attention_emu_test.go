package gpu

import (
	"context"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/conformance"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/runtime/graph"
)

// attnOpCase is an ONNX Attention model of one node, for the emulator.
type attnOpCase struct {
	name        string
	opset       int64
	threeD      bool
	b, hq, hk   int
	sq, skv, pl int // pl: past length (0: no cache)
	d, dv       int
	attrs       []*ir.Attribute
	mask        []int
	boolMask    bool
	nonpad      []int64
	present     bool
	qk          int64 // qk_matmul_output_mode + 1 (0: no qk output)
}

func (c attnOpCase) model() (*ir.Model, map[string]*ir.Tensor) {
	r := rand.New(rand.NewSource(int64(len(c.name))))
	rt := func(dims ...int) *ir.Tensor {
		t := ir.NewTensor(ir.Float, dims)
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(r.NormFloat64())
		}
		return t
	}
	in := map[string]*ir.Tensor{}
	if c.threeD {
		in["q"], in["k"], in["v"] = rt(c.b, c.sq, c.hq*c.d), rt(c.b, c.skv, c.hk*c.d), rt(c.b, c.skv, c.hk*c.dv)
	} else {
		in["q"], in["k"], in["v"] = rt(c.b, c.hq, c.sq, c.d), rt(c.b, c.hk, c.skv, c.d), rt(c.b, c.hk, c.skv, c.dv)
	}
	inputs := []string{"q", "k", "v"}
	if c.mask != nil {
		if c.boolMask {
			m := ir.NewTensor(ir.Bool, c.mask)
			for i := range m.Bools() {
				m.Bools()[i] = r.Float64() < 0.7
			}
			in["mask"] = m
		} else {
			in["mask"] = rt(c.mask...)
		}
	}
	if c.pl > 0 {
		in["past_k"], in["past_v"] = rt(c.b, c.hk, c.pl, c.d), rt(c.b, c.hk, c.pl, c.dv)
	}
	if c.nonpad != nil {
		in["nonpad"] = ir.FromSlice([]int{len(c.nonpad)}, c.nonpad)
	}
	for _, name := range []string{"mask", "past_k", "past_v", "nonpad"} {
		if in[name] != nil {
			inputs = append(inputs, name)
		} else {
			inputs = append(inputs, "")
		}
	}
	for inputs[len(inputs)-1] == "" {
		inputs = inputs[:len(inputs)-1]
	}
	outputs := []string{"y"}
	if c.present || c.qk > 0 {
		outputs = append(outputs, "", "")
		if c.present {
			outputs[1], outputs[2] = "present_k", "present_v"
		}
	}
	attrs := append([]*ir.Attribute{}, c.attrs...)
	if c.qk > 0 {
		outputs = append(outputs, "qk")
		attrs = append(attrs, &ir.Attribute{Name: "qk_matmul_output_mode", Type: ir.AttrInt, Int: c.qk - 1})
	}
	if c.threeD {
		attrs = append(attrs, &ir.Attribute{Name: "q_num_heads", Type: ir.AttrInt, Int: int64(c.hq)}, &ir.Attribute{Name: "kv_num_heads", Type: ir.AttrInt, Int: int64(c.hk)})
	}
	g := &ir.Graph{Name: "attention", Initializers: map[string]*ir.Tensor{},
		Nodes: []*ir.Node{{Name: "att", OpType: "Attention", Inputs: inputs, Outputs: outputs, Attrs: attrs}}}
	for _, name := range inputs {
		if name != "" {
			g.Inputs = append(g.Inputs, &ir.ValueInfo{Name: name, Type: ir.TypeInfo{DType: in[name].DType, Shape: ir.ShapeOf(in[name].Shape), RankKnown: true}})
		}
	}
	for _, name := range outputs {
		if name != "" {
			g.Outputs = append(g.Outputs, &ir.ValueInfo{Name: name})
		}
	}
	return &ir.Model{IRVersion: 10, Opsets: map[string]int64{"": c.opset}, Graph: g}, in
}

// TestAttentionOpOnEmulator runs ONNX Attention nodes through the GPU
// backend (rewrite, lowering with grouped heads split into the batch,
// attention_f32's softcap, causal offset, padded masks, key lengths and
// scores output, the KV-cache Concat) on the emulator and compares every
// output with the CPU program's.
func TestAttentionOpOnEmulator(t *testing.T) {
	i := func(name string, v int64) *ir.Attribute { return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v} }
	f := func(name string, v float32) *ir.Attribute {
		return &ir.Attribute{Name: name, Type: ir.AttrFloat, Float: v}
	}
	cases := []attnOpCase{
		{name: "4-D", opset: 23, b: 2, hq: 3, hk: 3, sq: 4, skv: 6, d: 8, dv: 8},
		{name: "3-D gqa", opset: 23, threeD: true, b: 2, hq: 6, hk: 2, sq: 5, skv: 7, d: 4, dv: 6},
		{name: "4-D gqa causal cache", opset: 23, b: 2, hq: 4, hk: 2, sq: 3, skv: 3, pl: 5, d: 8, dv: 4, present: true, attrs: []*ir.Attribute{i("is_causal", 1)}},
		{name: "3-D cache float mask qk bias", opset: 23, threeD: true, b: 2, hq: 3, hk: 3, sq: 4, skv: 2, pl: 6, d: 8, dv: 8, present: true, mask: []int{4, 8}, qk: 3},
		{name: "3-D present without past", opset: 23, threeD: true, b: 1, hq: 2, hk: 2, sq: 3, skv: 3, d: 4, dv: 4, present: true},
		{name: "4-D present without past", opset: 23, b: 1, hq: 4, hk: 2, sq: 3, skv: 3, d: 4, dv: 4, present: true},
		{name: "bool mask causal mqa", opset: 23, b: 1, hq: 4, hk: 1, sq: 5, skv: 5, d: 8, dv: 8, mask: []int{1, 4, 5, 5}, boolMask: true, attrs: []*ir.Attribute{i("is_causal", 1)}},
		{name: "short mask padded", opset: 23, b: 2, hq: 2, hk: 2, sq: 3, skv: 6, d: 8, dv: 8, mask: []int{2, 1, 3, 4}},
		{name: "nonpad padded mask", opset: 24, b: 2, hq: 3, hk: 3, sq: 4, skv: 6, d: 8, dv: 10, mask: []int{2, 3, 4, 4}, nonpad: []int64{5, 3}},
		{name: "softcap qk mode 0", opset: 23, b: 1, hq: 2, hk: 2, sq: 3, skv: 40, d: 8, dv: 8, attrs: []*ir.Attribute{f("softcap", 1.5)}, qk: 1},
		{name: "softcap scale qk mode 1", opset: 23, b: 1, hq: 2, hk: 2, sq: 3, skv: 5, d: 8, dv: 8, attrs: []*ir.Attribute{f("softcap", 1.5), f("scale", 0.7)}, qk: 2},
		{name: "gqa qk weights long", opset: 23, b: 1, hq: 4, hk: 2, sq: 20, skv: 70, d: 8, dv: 8, mask: []int{20, 70}, qk: 4, attrs: []*ir.Attribute{i("is_causal", 1)}},
	}
	for _, c := range cases {
		for _, noFuse := range []bool{false, true} {
			name := c.name
			if noFuse {
				name += "/nofuse"
			}
			t.Run(name, func(t *testing.T) { c.runOnEmulator(t, noFuse) })
		}
	}
}

// runOnEmulator compiles the case on the emulated GPU (graph rewrites on
// or off) and compares every output with the CPU program's.
func (c attnOpCase) runOnEmulator(t *testing.T, noFuse bool) {
	m, in := c.model()
	prog, err := graph.Compile(m, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	requireAccepted(t, prog)
	want, err := prog.Run(context.Background(), in, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, e, id := compileOnEmu(t, m, noFuse)
	got, err := s.Run(context.Background(), id, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d outputs, want %d", len(got), len(want))
	}
	for name, w := range want {
		if _, _, err := conform.Compare(got[name], w, conform.Tolerance{Rtol: 1e-4, Atol: 1e-5}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	pl, err := lowerPlan(s.parts[id].prog, in, map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	for _, call := range pl.calls {
		ran = ran || (call.k != nil && call.k.kernel == "attention_f32")
	}
	if !ran {
		t.Fatal("the attention kernel did not run")
	}
	if err := s.Release(context.Background(), id); err != nil || len(e.mem) != 0 {
		t.Fatalf("release: %v, %d allocations left", err, len(e.mem))
	}
}

// TestAttentionRefusals: the GPU backend refuses Attention nodes it cannot
// run, with a reason, so that they fall back to the cpu backend.
func TestAttentionRefusals(t *testing.T) {
	f32, f16 := ir.Float, ir.Float16
	cases := []struct {
		dts  []ir.DType
		want string
	}{
		{[]ir.DType{f16, f16, f16}, "Attention input 0 of type float16 is not supported on the gpu backend"},
		{[]ir.DType{f32, f32, ir.Double}, "Attention input 2 of type float64"},
		{[]ir.DType{f32, f32, f32, ir.Int64}, "Attention input 3 of type int64"},
	}
	for _, c := range cases {
		v := verdict(plugins.NodeQuery{Name: "att", OpType: "Attention", Opset: 23, InputDTypes: c.dts})
		if v.Accepted || !strings.Contains(v.Reason, c.want) {
			t.Errorf("%v: %+v, want a refusal containing %q", c.dts, v, c.want)
		}
	}
	if v := verdict(plugins.NodeQuery{Name: "att", OpType: "Attention", Opset: 24, InputDTypes: []ir.DType{f32, f32, f32, ir.Bool, f32, f32, ir.Int64}}); !v.Accepted {
		t.Errorf("float32 Attention refused: %s", v.Reason)
	}
}

// TestNodeSuiteAttentionOnEmulator runs ONNX 1.22's float32
// test_attention_* node cases (from ../shared/onnx-node, found as the node
// suite finds it, when present)
// through the GPU backend on the emulator against their reference outputs.
func TestNodeSuiteAttentionOnEmulator(t *testing.T) {
	root, tried := conformance.FindONNX122(".")
	dirs, _ := filepath.Glob(filepath.Join(root, "node", "test_attention_*"))
	if root == "" || len(dirs) == 0 {
		t.Skip(conformance.MissingMessage("onnx-1.22", tried))
	}
	var kept []string
	for _, d := range dirs {
		if !strings.Contains(d, "_expanded") && !strings.Contains(d, "fp16") {
			kept = append(kept, d)
		}
	}
	cases, err := conform.Find(kept)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var runners []*emuRunner
			res := conform.Run(context.Background(), c, emuOpener(false, &runners), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5})
			if !res.Pass {
				t.Fatalf("%v (max abs %g, max rel %g)", res.Err, res.MaxAbs, res.MaxRel)
			}
		})
	}
}
