package gpu

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/runtime/graph"
)

func TestVerdicts(t *testing.T) {
	f, i64, b, h := ir.Float, ir.Int64, ir.Bool, ir.Float16
	cases := []struct {
		op, domain string
		opset      int64
		in         []ir.DType
		ok         bool
		reason     string
	}{
		{"MatMul", "", 17, []ir.DType{f, f}, true, ""},
		{"MatMul", "", 17, []ir.DType{h, h}, false, fmt.Sprintf("MatMul on %v (input 0) is not supported on the gpu backend (it takes %v)", h, f)},
		{"Add", "", 17, []ir.DType{b, b}, true, ""},
		{"Add", "", 17, []ir.DType{i64, i64}, true, ""},
		{"Pow", "", 17, []ir.DType{i64, i64}, false, fmt.Sprintf("Pow on %v (input 0) is not supported on the gpu backend (it takes %v)", i64, f)},
		{"Where", "", 17, []ir.DType{b, f, f}, true, ""},
		{"Where", "", 17, []ir.DType{b, h, h}, false, fmt.Sprintf("Where on %v (input 1) is not supported on the gpu backend (it takes %s)", h, typeList(anyDevice))},
		{"Gather", "", 17, []ir.DType{f, i64}, true, ""},
		{"Gather", "", 17, []ir.DType{f, ir.Int16}, false, fmt.Sprintf("Gather indices of type %v are not supported on the gpu backend", ir.Int16)},
		{"Shape", "", 17, []ir.DType{h}, true, ""},
		{"FusedAttention", "com.attnrun", 1, []ir.DType{f, f, f, b}, true, ""},
		{"ReduceMean", "", 17, []ir.DType{f}, false, "the gpu backend has no kernel for ReduceMean"},
		{"Softmax", "", 17, []ir.DType{ir.Undefined}, true, ""},
		{"Softmax", "", 99, []ir.DType{f}, false, "unsupported opset version"},
		{"Softmax", "", 1, []ir.DType{f}, true, ""},
		{"Add", "", 6, []ir.DType{f, f}, false, "Add before opset 7 is not supported on the gpu backend"},
		{"Concat", "", 3, []ir.DType{f, f}, false, "Concat before opset 4"},
		{"Add", "", 25, []ir.DType{f, f}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			v := verdict(plugins.NodeQuery{OpType: c.op, Domain: c.domain, Opset: c.opset, InputDTypes: c.in})
			if v.Accepted != c.ok || !strings.Contains(v.Reason, c.reason) {
				t.Errorf("verdict %+v, want accepted=%v reason containing %q", v, c.ok, c.reason)
			}
		})
	}
}

func TestPlanArena(t *testing.T) {
	cases := []struct {
		name  string
		bufs  []interval
		offs  map[string]int64
		total int64
	}{
		{"disjoint lifetimes share", []interval{{"a", 1000, 0, 1}, {"b", 1000, 2, 3}}, map[string]int64{"a": 0, "b": 0}, 1024},
		{"overlap at a step", []interval{{"a", 1000, 0, 1}, {"b", 1000, 1, 2}}, map[string]int64{"a": 0, "b": 1024}, 2048},
		{"largest first, small in a gap", []interval{{"big", 4096, 0, 4}, {"x", 256, 1, 1}, {"y", 256, 2, 3}, {"z", 512, 1, 2}},
			map[string]int64{"big": 0, "z": 4096, "x": 4608, "y": 4608}, 4864},
		{"input kept to the end", []interval{{"in", 10, -1, 5}, {"t", 10, 0, 0}, {"u", 10, 1, 1}},
			map[string]int64{"in": 0, "t": 256, "u": 256}, 512},
		{"empty buffer still aligned", []interval{{"e", 0, 0, 0}, {"f", 1, 0, 0}}, map[string]int64{"f": 0, "e": 256}, 512},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			offs, total, err := planArena(c.bufs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(offs, c.offs) || total != c.total {
				t.Errorf("offsets %v total %d, want %v %d", offs, total, c.offs, c.total)
			}
		})
	}
	if _, _, err := planArena([]interval{{"a", 1, 2, 1}}); err == nil {
		t.Error("a lifetime ending before it starts was accepted")
	}
}

func TestCoalesce(t *testing.T) {
	cases := []struct {
		name    string
		shape   []int
		strides [][]int
		want    []int
		wantSt  [][]int
	}{
		{"contiguous collapses", []int{2, 3, 4}, [][]int{{12, 4, 1}, {12, 4, 1}}, []int{24}, [][]int{{1}, {1}}},
		{"broadcast row", []int{2, 3, 4}, [][]int{{12, 4, 1}, {0, 0, 1}}, []int{6, 4}, [][]int{{4, 1}, {0, 1}}},
		{"size-1 dims dropped", []int{1, 5, 1}, [][]int{{5, 1, 1}}, []int{5}, [][]int{{1}}},
		{"transpose keeps dims", []int{2, 3}, [][]int{{1, 2}, {3, 1}}, []int{2, 3}, [][]int{{1, 2}, {3, 1}}},
		{"scalar", []int{}, [][]int{{}}, nil, [][]int{nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sh, st := coalesce(c.shape, c.strides...)
			if !reflect.DeepEqual(sh, c.want) || !reflect.DeepEqual(st, c.wantSt) {
				t.Errorf("coalesce = %v %v, want %v %v", sh, st, c.want, c.wantSt)
			}
		})
	}
}

func TestLaunchConfig(t *testing.T) {
	for _, c := range []struct {
		n    int64
		grid uint32
	}{{0, 1}, {1, 1}, {256, 1}, {257, 2}, {1 << 40, maxGridX}} {
		g, b := grid1D(c.n)
		if g != [3]uint32{c.grid, 1, 1} || b != [3]uint32{elemBlock, 1, 1} {
			t.Errorf("grid1D(%d) = %v %v, want grid %d", c.n, g, b, c.grid)
		}
	}
	for _, c := range []struct {
		cols int64
		want uint32
	}{{1, 32}, {33, 64}, {768, 256}, {8192, 256}} {
		if got := rowBlock(c.cols); got != c.want {
			t.Errorf("rowBlock(%d) = %d, want %d", c.cols, got, c.want)
		}
	}
	// Head size 64: K tile 32×65, V tile 32×64, Q rows 16×64, P 4×32 floats.
	if got := attnShared(64, 64); got != 4*(32*65+32*64+16*64+4*32) {
		t.Errorf("attnShared(64, 64) = %d", got)
	}
	if got := attnShared(attnMaxD, attnMaxD); got > 48<<10 {
		t.Errorf("attnShared at the largest head size is %d bytes, over the 48 KiB static limit", got)
	}
	if got := attnGrid(8192, 96); got != [3]uint32{512, 96, 1} {
		t.Errorf("attnGrid(8192, 96) = %v", got)
	}
	if got := attnGrid(17, 1<<20); got != [3]uint32{2, 65535, 1} {
		t.Errorf("attnGrid(17, 2^20) = %v", got)
	}
}

func TestMatmulBatches(t *testing.T) {
	cases := []struct {
		name       string
		outB       []int
		sa, sb, sc []int
		offs       [][3]int64
		count      int
		stride     [3]int64
	}{
		{"no batch", nil, nil, nil, nil, [][3]int64{{0, 0, 0}}, 1, [3]int64{}},
		{"[B,H] both full: one call", []int{2, 3}, []int{30, 10}, []int{60, 20}, []int{15, 5}, [][3]int64{{0, 0, 0}}, 6, [3]int64{10, 20, 5}},
		{"shared weight", []int{4}, []int{8}, []int{0}, []int{6}, [][3]int64{{0, 0, 0}}, 4, [3]int64{8, 0, 6}},
		{"[2,1]×[1,3]: loop outer", []int{2, 3}, []int{5, 0}, []int{0, 7}, []int{33, 11}, [][3]int64{{0, 0, 0}, {5, 0, 33}}, 3, [3]int64{0, 7, 11}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			offs, count, stride := matmulBatches(c.outB, c.sa, c.sb, c.sc)
			if !reflect.DeepEqual(offs, c.offs) || count != c.count || stride != c.stride {
				t.Errorf("got %v %d %v, want %v %d %v", offs, count, stride, c.offs, c.count, c.stride)
			}
		})
	}
}

func TestSliceWindow(t *testing.T) {
	big := int64(math.MaxInt64)
	cases := []struct {
		name                      string
		shape                     []int
		starts, ends, axes, steps []int64
		hasAxes, hasSteps         bool
		firsts, stepOf            []int64
	}{
		{"prefix", []int{10, 4}, []int64{0}, []int64{3}, nil, nil, false, false, []int64{0, 0}, []int64{1, 1}},
		{"negative axis and start", []int{10, 4}, []int64{-2}, []int64{big}, []int64{-1}, nil, true, false, []int64{0, 2}, []int64{1, 1}},
		{"reverse", []int{5}, []int64{-1}, []int64{-big}, []int64{0}, []int64{-1}, true, true, []int64{4}, []int64{-1}},
		{"step 2 clamped", []int{7, 3}, []int64{1, 100}, []int64{100, 0}, []int64{0, 1}, []int64{2, -1}, true, true, []int64{1, 2}, []int64{2, -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, s, err := sliceWindow(c.shape, c.starts, c.ends, c.axes, c.steps, c.hasAxes, c.hasSteps)
			if err != nil || !reflect.DeepEqual(f, c.firsts) || !reflect.DeepEqual(s, c.stepOf) {
				t.Errorf("got %v %v %v, want %v %v", f, s, err, c.firsts, c.stepOf)
			}
		})
	}
	if _, _, err := sliceWindow([]int{3}, []int64{0}, []int64{1}, nil, []int64{0}, false, true); err == nil {
		t.Error("step 0 accepted")
	}
}

func TestSoftmaxGeometry(t *testing.T) {
	for _, c := range []struct {
		shape             []int
		axis, opset       int
		rows, cols, inner int64
	}{
		{[]int{2, 3, 4}, 2, 13, 6, 4, 1},
		{[]int{2, 3, 4}, 1, 13, 8, 3, 4},
		{[]int{2, 3, 4}, 1, 11, 2, 12, 1}, // opset < 13 flattens from axis on
	} {
		r, cl, in := softmaxGeometry(c.shape, c.axis, c.opset)
		if r != c.rows || cl != c.cols || in != c.inner {
			t.Errorf("softmaxGeometry(%v, %d, %d) = %d %d %d, want %d %d %d", c.shape, c.axis, c.opset, r, cl, in, c.rows, c.cols, c.inner)
		}
	}
}

func TestTensorBytes(t *testing.T) {
	for _, tc := range []*ir.Tensor{
		ir.FromSlice([]int{2}, []float32{1, -2}),
		ir.FromSlice([]int{3}, []bool{true, false, true}),
		ir.FromSlice([]int{1}, []int64{-5}),
	} {
		b, err := tensorBytes(tc)
		if err != nil || int64(len(b)) != tc.Bytes() {
			t.Fatalf("%v: %d bytes, %v", tc, len(b), err)
		}
		back, view, err := newHostTensor(tc.DType, tc.Shape)
		if err != nil {
			t.Fatal(err)
		}
		copy(view, b)
		if fmt.Sprint(back.Data) != fmt.Sprint(tc.Data) {
			t.Errorf("round trip %v, want %v", back.Data, tc.Data)
		}
	}
	if b, _ := tensorBytes(ir.FromSlice([]int{3}, []bool{true, false, true})); !reflect.DeepEqual(b, []byte{1, 0, 1}) {
		t.Errorf("bool bytes %v, want 1 0 1", b)
	}
	if _, err := tensorBytes(&ir.Tensor{DType: ir.Float16, Shape: []int{1}, Data: []uint16{0}}); err == nil {
		t.Error("float16 accepted")
	}
}

// wideHeads is attention with head size 160 (over the kernel's 128):
// softmax(Q·Kᵀ / √160)·V with Q, K, V float32[2, S, 160].
func wideHeads(d int) *ir.Model {
	s := ir.Dim{Param: "S"}
	typ := ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}, s, {Value: int64(d)}}}
	return &ir.Model{
		IRVersion: 8, Opsets: map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name:    "wide",
			Inputs:  []*ir.ValueInfo{{Name: "q", Type: typ}, {Name: "k", Type: typ}, {Name: "v", Type: typ}},
			Outputs: []*ir.ValueInfo{{Name: "y", Type: typ}},
			Nodes: []*ir.Node{
				{Name: "kt", OpType: "Transpose", Inputs: []string{"k"}, Outputs: []string{"kt"}, Attrs: []*ir.Attribute{{Name: "perm", Type: ir.AttrInts, Ints: []int64{0, 2, 1}}}},
				{Name: "s", OpType: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"s"}},
				{Name: "sc", OpType: "Div", Inputs: []string{"s", "c"}, Outputs: []string{"sc"}},
				{Name: "p", OpType: "Softmax", Inputs: []string{"sc"}, Outputs: []string{"p"}, Attrs: []*ir.Attribute{{Name: "axis", Type: ir.AttrInt, Int: -1}}},
				{Name: "y", OpType: "MatMul", Inputs: []string{"p", "v"}, Outputs: []string{"y"}},
			},
			Initializers:     map[string]*ir.Tensor{"c": ir.Scalar(float32(math.Sqrt(float64(d))))},
			InitializerOrder: []string{"c"},
		},
	}
}

// TestHeadSizeFallback checks that a fused node whose head size the kernel
// does not take runs as the original nodes, and one it takes runs the
// kernel, both matching the CPU program.
func TestHeadSizeFallback(t *testing.T) {
	for _, c := range []struct {
		d         int
		attention bool
	}{{160, false}, {128, true}} {
		t.Run(fmt.Sprint(c.d), func(t *testing.T) {
			m := wideHeads(c.d)
			s, _, id := compileOnEmu(t, m, false)
			prog, err := graph.Compile(m, graph.Options{})
			if err != nil {
				t.Fatal(err)
			}
			in := map[string]*ir.Tensor{}
			for k, name := range []string{"q", "k", "v"} {
				x := ir.NewTensor(ir.Float, []int{2, 5, c.d})
				for i := range x.Float32s() {
					x.Float32s()[i] = float32(math.Sin(float64(i*(k+3)))) / 4
				}
				in[name] = x
			}
			want, err := prog.Run(context.Background(), in, graph.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			kernels := runLikeCPU(t, s, id, in, want["y"])
			if has := strings.Contains(strings.Join(kernels, " "), "attention_f32"); has != c.attention {
				t.Errorf("kernels %v: attention kernel used = %v, want %v", kernels, has, c.attention)
			}
		})
	}
}

// runLikeCPU runs partition id on the emulator, checks its output y
// against the CPU program's (want), and returns the kernels it launched.
func runLikeCPU(t *testing.T, s *Server, id plugins.PartitionID, in map[string]*ir.Tensor, want *ir.Tensor) []string {
	t.Helper()
	got, err := s.Run(context.Background(), id, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := conform.Compare(got["y"], want, conform.Tolerance{Rtol: 1e-4, Atol: 1e-5}); err != nil {
		t.Error(err)
	}
	var kernels []string
	for _, dp := range s.parts[id].plans {
		for _, cl := range dp.calls {
			if cl.k != nil {
				kernels = append(kernels, cl.k.kernel)
			}
		}
	}
	return kernels
}

// kitchenSink uses the ops the reference models do not: Gemm (transB,
// alpha, beta, a broadcast C), LayerNormalization, Erf, Abs, Sqrt, Neg, a
// data-dependent Gather, Tile, a negative-step Slice, Less and Cast.
func kitchenSink() *ir.Model {
	f := func(dims ...int64) ir.TypeInfo {
		s := ir.Shape{}
		for _, d := range dims {
			s = append(s, ir.Dim{Value: d})
		}
		return ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: s}
	}
	ints := func(v ...int64) *ir.Tensor { return ir.FromSlice([]int{len(v)}, v) }
	fl := func(shape []int, n int) *ir.Tensor {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(math.Cos(float64(3*i+1))) * 0.7
		}
		return ir.FromSlice(shape, d)
	}
	attrI := func(name string, v int64) *ir.Attribute { return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v} }
	attrF := func(name string, v float32) *ir.Attribute {
		return &ir.Attribute{Name: name, Type: ir.AttrFloat, Float: v}
	}
	inits := map[string]*ir.Tensor{
		"scale": fl([]int{8}, 8), "bias": fl([]int{8}, 8), "W": fl([]int{4, 8}, 32), "C": fl([]int{4}, 4),
		"shape": ints(12, 8), "reps": ints(1, 2, 1), "st": ints(5), "en": ints(-100), "ax": ints(1), "sp": ints(-2),
	}
	var order []string
	for k := range inits {
		order = append(order, k)
	}
	sort.Strings(order)
	return &ir.Model{
		IRVersion: 8, Opsets: map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "sink",
			Inputs: []*ir.ValueInfo{
				{Name: "x", Type: f(2, 6, 8)},
				{Name: "idx", Type: ir.TypeInfo{DType: ir.Int64, RankKnown: true, Shape: ir.Shape{{Value: 3}}}},
			},
			Outputs: []*ir.ValueInfo{{Name: "y1", Type: f(12, 4)}, {Name: "y2", Type: f(2, 3, 8)}, {Name: "y3", Type: f(2, 6, 8)}},
			Nodes: []*ir.Node{
				{Name: "ln", OpType: "LayerNormalization", Inputs: []string{"x", "scale", "bias"}, Outputs: []string{"ln"}, Attrs: []*ir.Attribute{attrI("axis", -1), attrF("epsilon", 1e-5)}},
				{Name: "rs", OpType: "Reshape", Inputs: []string{"ln", "shape"}, Outputs: []string{"rs"}},
				{Name: "gm", OpType: "Gemm", Inputs: []string{"rs", "W", "C"}, Outputs: []string{"gm"}, Attrs: []*ir.Attribute{attrI("transB", 1), attrF("alpha", 0.5), attrF("beta", 2)}},
				{Name: "erf", OpType: "Erf", Inputs: []string{"gm"}, Outputs: []string{"erf"}},
				{Name: "abs", OpType: "Abs", Inputs: []string{"erf"}, Outputs: []string{"abs"}},
				{Name: "sqrt", OpType: "Sqrt", Inputs: []string{"abs"}, Outputs: []string{"sqrt"}},
				{Name: "y1", OpType: "Neg", Inputs: []string{"sqrt"}, Outputs: []string{"y1"}},
				{Name: "ga", OpType: "Gather", Inputs: []string{"x", "idx"}, Outputs: []string{"ga"}, Attrs: []*ir.Attribute{attrI("axis", 1)}},
				{Name: "ti", OpType: "Tile", Inputs: []string{"ga", "reps"}, Outputs: []string{"ti"}},
				{Name: "sl", OpType: "Slice", Inputs: []string{"x", "st", "en", "ax", "sp"}, Outputs: []string{"sl"}},
				{Name: "lt", OpType: "Less", Inputs: []string{"sl", "ga"}, Outputs: []string{"lt"}},
				{Name: "y2", OpType: "Cast", Inputs: []string{"lt"}, Outputs: []string{"y2"}, Attrs: []*ir.Attribute{attrI("to", int64(ir.Float))}},
				{Name: "y3", OpType: "Add", Inputs: []string{"ti", "x"}, Outputs: []string{"y3"}},
			},
			Initializers: inits, InitializerOrder: order,
		},
	}
}

// TestKitchenSinkOnEmulator compares the ops the models lack with the CPU
// program, and checks that an out-of-range Gather index is an error.
func TestKitchenSinkOnEmulator(t *testing.T) {
	m := kitchenSink()
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{dev: newEmu(), parts: map[plugins.PartitionID]*partition{}}
	id, _, err := s.Compile(context.Background(), data, plugins.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := graph.Compile(m, graph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := ir.NewTensor(ir.Float, []int{2, 6, 8})
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(math.Sin(float64(i))) * 2
	}
	in := map[string]*ir.Tensor{"x": x, "idx": ir.FromSlice([]int{3}, []int64{4, -1, 0})}
	want, err := prog.Run(context.Background(), in, graph.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Run(context.Background(), id, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"y1", "y2", "y3"} {
		if _, _, err := conform.Compare(got[name], want[name], conform.Tolerance{Rtol: 1e-5, Atol: 1e-6}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	in["idx"] = ir.FromSlice([]int{3}, []int64{0, 6, 1})
	if _, err := s.Run(context.Background(), id, in); err == nil || !strings.Contains(err.Error(), "Gather index was out of range") {
		t.Errorf("out-of-range index: %v", err)
	}
}

// TestPadOnEmulator runs constant-mode Pad (growing one axis, cropping
// another, with a constant_value input) on the emulator against the CPU
// program, and checks that the other modes are refused at lowering.
func TestPadOnEmulator(t *testing.T) {
	model := func(mode string) *ir.Model {
		x := ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: 3}}}
		return &ir.Model{
			IRVersion: 8, Opsets: map[string]int64{"": 18},
			Graph: &ir.Graph{
				Name: "pad", Inputs: []*ir.ValueInfo{{Name: "x", Type: x}}, Outputs: []*ir.ValueInfo{{Name: "y"}},
				Nodes: []*ir.Node{{Name: "pad", OpType: "Pad", Inputs: []string{"x", "pads", "v"}, Outputs: []string{"y"},
					Attrs: []*ir.Attribute{{Name: "mode", Type: ir.AttrString, String: []byte(mode)}}}},
				Initializers:     map[string]*ir.Tensor{"pads": ir.FromSlice([]int{4}, []int64{1, -1, 2, 0}), "v": ir.Scalar(float32(7))},
				InitializerOrder: []string{"pads", "v"},
			},
		}
	}
	in := map[string]*ir.Tensor{"x": ir.FromSlice([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6})}
	run := func(mode string) (map[string]*ir.Tensor, error) {
		data, err := onnx.Encode(model(mode))
		if err != nil {
			return nil, err
		}
		s := &Server{dev: newEmu(), parts: map[plugins.PartitionID]*partition{}}
		id, _, err := s.Compile(context.Background(), data, plugins.CompileOptions{})
		if err != nil {
			return nil, err
		}
		return s.Run(context.Background(), id, in)
	}
	got, err := run("constant")
	if err != nil {
		t.Fatal(err)
	}
	want := ir.FromSlice([]int{5, 2}, []float32{7, 7, 2, 3, 5, 6, 7, 7, 7, 7})
	if _, _, err := conform.Compare(got["y"], want, conform.Tolerance{}); err != nil {
		t.Errorf("%v: got %v", err, got["y"])
	}
	if _, err := run("reflect"); err == nil || !strings.Contains(err.Error(), `Pad mode "reflect" is not supported on the gpu backend`) {
		t.Errorf("reflect: %v", err)
	}
}
