package graph

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/runtime/conform"
)

// inProcess runs a Program directly, so this package's tests exercise the
// planner and executor without a backend process. fusions, when set,
// records the most fused regions any run's plan had.
type inProcess struct {
	p       *Program
	fusions *int
}

func (r inProcess) InputNames() []string  { return names(r.p.Model.Graph.Inputs) }
func (r inProcess) OutputNames() []string { return names(r.p.Model.Graph.Outputs) }
func (r inProcess) Close() error          { return nil }
func (r inProcess) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	out, err := r.p.Run(ctx, in, RunOptions{})
	if err == nil && r.fusions != nil {
		f, ferr := r.p.Fusions(in)
		if ferr != nil {
			return nil, ferr
		}
		*r.fusions = max(*r.fusions, len(f))
	}
	return out, err
}

func names(vs []*ir.ValueInfo) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// opener compiles models with opts; fusions (may be nil) receives the
// largest fusion count of any run.
func opener(opts Options, fusions *int) conform.Opener {
	return func(_ context.Context, path string) (conform.Runner, error) {
		m, err := onnx.Load(path, onnx.Options{})
		if err != nil {
			return nil, err
		}
		p, err := Compile(m, opts)
		if err != nil {
			return nil, err
		}
		return inProcess{p: p, fusions: fusions}, nil
	}
}

// TestModelsInProcess runs every bundled model's data sets through the
// executor, with attention fusion on and off, and compares with PyTorch's
// outputs. With fusion on, every model must have its attention fused.
func TestModelsInProcess(t *testing.T) {
	cases, err := conform.Find([]string{"../../models"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 15 {
		t.Fatalf("found %d model cases, want at least 15", len(cases))
	}
	for _, mode := range []struct {
		name string
		opts Options
	}{{"fused", Options{Threads: 2}}, {"unfused", Options{Threads: 2, NoFuse: true}}} {
		for _, c := range cases {
			t.Run(mode.name+"/"+c.Name, func(t *testing.T) {
				fusions := 0
				r := conform.Run(context.Background(), c, opener(mode.opts, &fusions), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5})
				if !r.Pass {
					t.Fatalf("%v (max abs %g)", r.Err, r.MaxAbs)
				}
				if mode.opts.NoFuse && fusions != 0 {
					t.Errorf("NoFuse plan has %d fusions", fusions)
				}
				if !mode.opts.NoFuse && fusions < 1 {
					t.Errorf("no attention fused")
				}
			})
		}
	}
}

// TestPlanFoldsShapeSubgraph checks that, once input shapes are concrete,
// PyTorch's Shape→Gather→Unsqueeze→Concat→Reshape chains are folded away
// and only compute nodes remain, and that the plan is cached per shape.
func TestPlanFoldsShapeSubgraph(t *testing.T) {
	m, err := onnx.Load("../../models/s000_multi_head/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := ir.NewTensor(ir.Float, []int{2, 5, 32})
	pl, err := p.planFor(map[string]*ir.Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range pl.steps {
		switch st.node.OpType {
		case "Shape", "Gather", "Unsqueeze", "Concat", "Constant", "Cast":
			t.Errorf("node %q (%s) was not folded", st.node.Label(), st.node.OpType)
		}
	}
	again, _ := p.planFor(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 5, 32})})
	if again != pl {
		t.Error("same shapes built a second plan")
	}
	other, _ := p.planFor(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{1, 7, 32})})
	if other == pl {
		t.Error("different shapes reused a plan")
	}
	// Symbolic inference at compile time keeps the dim names.
	out := p.Types[m.Graph.Outputs[0].Name].Type
	if got := out.Shape.String(); got != "[batch, seq, 32]" {
		t.Errorf("inferred output shape %s, want [batch, seq, 32]", got)
	}
}

// TestIntermediatesReleased checks the last-use bookkeeping: every
// intermediate is freed by some step, and graph outputs never are.
func TestIntermediatesReleased(t *testing.T) {
	m, err := onnx.Load("../../models/s002_self_attention_v1/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.planFor(map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{1, 3, 32})})
	if err != nil {
		t.Fatal(err)
	}
	freed := map[int]bool{}
	for _, st := range pl.steps {
		for _, s := range st.free {
			freed[s] = true
		}
	}
	for _, s := range pl.outputs {
		if freed[s] {
			t.Errorf("graph output slot %d is freed", s)
		}
	}
	for _, st := range pl.steps[:len(pl.steps)-1] {
		for _, s := range st.outs {
			isOut := false
			for _, o := range pl.outputs {
				isOut = isOut || o == s
			}
			if !isOut && !freed[s] {
				t.Errorf("intermediate of %q is never freed", st.node.Label())
			}
		}
	}
}

func TestInputErrors(t *testing.T) {
	m, err := onnx.Load("../../models/s000_causal/model.onnx", onnx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, Options{StrictDims: true})
	if err != nil {
		t.Fatal(err)
	}
	x := ir.NewTensor(ir.Float, []int{2, 4, 32})
	mask := ir.NewTensor(ir.Bool, []int{2, 4})
	cases := []struct {
		name string
		in   map[string]*ir.Tensor
		want string
	}{
		{"missing", map[string]*ir.Tensor{"x": x}, `missing input "mask" (bool[batch, seq])`},
		{"extra", map[string]*ir.Tensor{"x": x, "mask": mask, "y": x}, `unexpected input "y": the model's inputs are x, mask`},
		{"dtype", map[string]*ir.Tensor{"x": x, "mask": ir.NewTensor(ir.Float, []int{2, 4})}, `input "mask" has element type float32, the model expects bool`},
		{"rank", map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{8, 32}), "mask": mask}, `input "x" has shape [8x32], the model expects rank 3 [batch, seq, 32]`},
		{"fixed dim", map[string]*ir.Tensor{"x": ir.NewTensor(ir.Float, []int{2, 4, 16}), "mask": mask}, `dim 2 must be 32`},
		{"symbol bound twice (StrictDims)", map[string]*ir.Tensor{"x": x, "mask": ir.NewTensor(ir.Bool, []int{2, 5})}, `input "mask" dim 1 (seq) is 5, but x dim 1 set seq=4`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Run(context.Background(), c.in, RunOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant it to contain %s", err, c.want)
			}
		})
	}
	// Without StrictDims the run goes ahead, and this model cannot take a
	// mask longer than x: the node that finds out says so.
	lenient, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lenient.Run(context.Background(), map[string]*ir.Tensor{"x": x, "mask": ir.NewTensor(ir.Bool, []int{2, 5})}, RunOptions{})
	if want := `node "/Reshape_1" (Reshape): cannot reshape [2, 5] to [2, 1, 1, 4]`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant it to contain %s", err, want)
	}
}

// TestCompileErrors covers the graph-level malformed corpus: each error
// names the node and op.
func TestCompileErrors(t *testing.T) {
	cases := []struct{ file, want string }{
		{"cycle.onnx", "cycle"},
		{"undefined_input.onnx", "is not a graph input, an initializer, or any node's output"},
		{"unknown_op.onnx", "unsupported op FooBar at opset ai.onnx 17: attnrun has no kernel for it (attnrun ops lists the ops it runs)"},
		{"unknown_domain.onnx", `unknown op domain "com.example"`},
		{"duplicate_output.onnx", "is already produced by node"},
		{"unproduced_output.onnx", "is produced by no node"},
		{"matmul_mismatch.onnx", "(MatMul)"},
		{"bad_perm.onnx", "(Transpose)"},
		{"softmax_axis.onnx", "(Softmax)"},
		{"reshape_count.onnx", "(Reshape)"},
		{"opset99.onnx", "opset 99"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("../../onnx/testdata/malformed", c.file)
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			m, err := onnx.Load(path, onnx.Options{})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			_, err = Compile(m, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// TestCompileNamesEveryUnsupportedOp: a model with several ops attnrun
// lacks is refused once, naming the first node and every such op with its
// node count, so that a user sees the whole list at once.
func TestCompileNamesEveryUnsupportedOp(t *testing.T) {
	node := func(name, op, in, out string) *ir.Node {
		return &ir.Node{Name: name, OpType: op, Inputs: []string{in}, Outputs: []string{out}}
	}
	m := &ir.Model{IRVersion: 8, Opsets: map[string]int64{"": 17}, Graph: &ir.Graph{
		Inputs:  []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, RankKnown: true, Shape: ir.Shape{{Value: 2}}}}},
		Outputs: []*ir.ValueInfo{{Name: "e"}},
		Nodes: []*ir.Node{node("a", "Relu", "x", "a"), node("b", "Celu", "a", "b"), node("c", "FooBar", "b", "c"),
			node("d", "Celu", "c", "d"), node("e", "Neg", "d", "e")},
	}}
	_, err := Compile(m, Options{})
	want := `node "b" (Celu): unsupported op Celu at opset ai.onnx 17: attnrun has no kernel for it (attnrun ops lists the ops it runs); in all, 3 nodes use ops attnrun lacks: Celu (2 nodes), FooBar (1 node)`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if !errors.Is(err, ops.ErrUnknownOp) {
		t.Errorf("%v does not wrap ops.ErrUnknownOp", err)
	}
}

// TestCompileNarrowTypes: a model that converts or moves a narrow type
// compiles; one that computes with it is refused, in one line naming the
// node, the op, the type and (where one exists) the opset that takes it.
func TestCompileNarrowTypes(t *testing.T) {
	model := func(opset int64, in ir.DType, nodes ...*ir.Node) *ir.Model {
		return &ir.Model{IRVersion: 13, Opsets: map[string]int64{"": opset}, Graph: &ir.Graph{
			Inputs:       []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: in, RankKnown: true, Shape: ir.Shape{{Value: 2}, {Value: 3}}}}},
			Outputs:      []*ir.ValueInfo{{Name: "y"}},
			Nodes:        nodes,
			Initializers: map[string]*ir.Tensor{"s": ir.FromSlice([]int{1}, []int64{6})},
		}}
	}
	node := func(op string, in []string, attrs ...*ir.Attribute) *ir.Node {
		return &ir.Node{Name: "n", OpType: op, Inputs: in, Outputs: []string{"y"}, Attrs: attrs}
	}
	to := &ir.Attribute{Name: "to", Type: ir.AttrInt, Int: int64(ir.Float)}
	cases := []struct {
		name string
		m    *ir.Model
		want string // "" compiles
	}{
		{"cast from float8", model(19, ir.Float8E4M3FN, node("Cast", []string{"x"}, to)), ""},
		{"reshape int4", model(21, ir.Int4, node("Reshape", []string{"x", "s"})), ""},
		{"add float8", model(25, ir.Float8E5M2, node("Add", []string{"x", "x"})),
			`node "n" (Add): input 0 has element type float8e5m2, which attnrun does not compute with`},
		{"reshape int4 at opset 19", model(19, ir.Int4, node("Reshape", []string{"x", "s"})),
			`node "n" (Reshape): input 0 has element type int4, which Reshape takes only from opset 21 on (this node runs Reshape-19)`},
		{"cast from int2 at opset 24", model(24, ir.Int2, node("Cast", []string{"x"}, to)),
			`node "n" (Cast): input 0 has element type int2, which Cast takes only from opset 25 on`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile(c.m, Options{})
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is more than one line: %q", err)
			}
		})
	}
}

// TestOutputsOwnedByCaller: without ReuseOutputs, Run's outputs belong to
// the caller, also those folded to constants (the shape of a static input,
// an Identity of a weight): writing into them changes neither the model's
// weights nor a later run's outputs (an in-process backend hands them to
// the user as they are).
func TestOutputsOwnedByCaller(t *testing.T) {
	w := ir.FromSlice([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	m := &ir.Model{
		IRVersion: 8,
		Opsets:    map[string]int64{"": 17},
		Graph: &ir.Graph{
			Name: "owned",
			Nodes: []*ir.Node{
				{Name: "shape", OpType: "Shape", Inputs: []string{"x"}, Outputs: []string{"s"}},
				{Name: "weight", OpType: "Identity", Inputs: []string{"W"}, Outputs: []string{"wout"}},
				{Name: "add", OpType: "Add", Inputs: []string{"x", "W"}, Outputs: []string{"y"}},
			},
			Inputs: []*ir.ValueInfo{{Name: "x", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 2}, {Value: 3}}, RankKnown: true}}},
			Outputs: []*ir.ValueInfo{
				{Name: "s", Type: ir.TypeInfo{DType: ir.Int64, Shape: ir.Shape{{Value: 2}}, RankKnown: true}},
				{Name: "wout", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 2}, {Value: 3}}, RankKnown: true}},
				{Name: "y", Type: ir.TypeInfo{DType: ir.Float, Shape: ir.Shape{{Value: 2}, {Value: 3}}, RankKnown: true}},
			},
			Initializers:     map[string]*ir.Tensor{"W": w},
			InitializerOrder: []string{"W"},
		},
	}
	p, err := Compile(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*ir.Tensor{"x": ir.FromSlice([]int{2, 3}, []float32{0, 0, 0, 1, 1, 1})}
	first, err := p.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first["s"].Data.([]int64)[0] = -7
	first["wout"].Data.([]float32)[0] = -7
	second, err := p.Run(context.Background(), in, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := second["s"].Data.([]int64); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("second run's shape output %v, want [2 3]", got)
	}
	if got := second["wout"].Data.([]float32); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Errorf("second run's weight output %v", got)
	}
	if got := w.Data.([]float32); got[0] != 1 {
		t.Errorf("the model's weight was changed through an output: %v", got)
	}
	if got := second["y"].Data.([]float32); !slices.Equal(got, []float32{1, 2, 3, 5, 6, 7}) {
		t.Errorf("y = %v", got)
	}
}
