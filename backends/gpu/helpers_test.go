package gpu

import (
	"context"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/graph"
)

func loadModel(path string) (*ir.Model, error) { return onnx.Load(path, onnx.Options{}) }

// zeroInputs makes zero-valued inputs for prog's declared inputs, binding
// symbolic dims from dims (3 when not given).
func zeroInputs(t *testing.T, prog *graph.Program, dims map[string]int) map[string]*ir.Tensor {
	t.Helper()
	in := map[string]*ir.Tensor{}
	for _, vi := range prog.Model.Graph.Inputs {
		var shape []int
		for _, d := range vi.Type.Shape {
			switch {
			case d.Param != "":
				v, ok := dims[d.Param]
				if !ok {
					v = 3
				}
				shape = append(shape, v)
			case d.Value >= 0:
				shape = append(shape, int(d.Value))
			default:
				shape = append(shape, 3)
			}
		}
		in[vi.Name] = ir.NewTensor(vi.Type.DType, shape)
	}
	return in
}

// nodeQuery is the capability query the session sends for node n.
func nodeQuery(prog *graph.Program, n *ir.Node) plugins.NodeQuery {
	q := plugins.NodeQuery{Name: n.Label(), OpType: n.OpType, Domain: n.Domain, Opset: int64(prog.Opsets[n])}
	for _, in := range n.Inputs {
		dt := ir.Undefined
		if in != "" {
			dt = prog.Types[in].Type.DType
		}
		q.InputDTypes = append(q.InputDTypes, dt)
	}
	return q
}

// compileOnEmu compiles model m (with graph rewrites unless noFuse) as one
// partition of a Server on a fresh emulator.
func compileOnEmu(t *testing.T, m *ir.Model, noFuse bool) (*Server, *emu, plugins.PartitionID) {
	t.Helper()
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	e := newEmu()
	s := &Server{dev: e, parts: map[plugins.PartitionID]*partition{}}
	id, _, err := s.Compile(context.Background(), data, plugins.CompileOptions{NoFuse: noFuse})
	if err != nil {
		t.Fatal(err)
	}
	return s, e, id
}

// requireAccepted fails t unless the GPU backend takes every node of prog.
func requireAccepted(t *testing.T, prog *graph.Program) {
	t.Helper()
	for _, n := range prog.Order {
		if v := verdict(nodeQuery(prog, n)); !v.Accepted {
			t.Errorf("node %s refused: %s", n.Label(), v.Reason)
		}
	}
}
