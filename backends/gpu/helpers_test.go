package gpu

import (
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
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
