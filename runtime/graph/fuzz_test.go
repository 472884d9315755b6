package graph

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// fuzzLimit keeps fuzzed models from asking for big tensors: the point is
// that validation and inference never panic, not that they allocate.
const fuzzLimit = 64 << 20

// addSeeds seeds a fuzz target with every bundled model and every file of
// the malformed corpus.
func addSeeds(f *testing.F, add func(data []byte)) {
	for _, pattern := range []string{"../../models/*/model.onnx", "../../onnx/testdata/malformed/*.onnx"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			add(data)
		}
	}
}

// FuzzCompile decodes arbitrary bytes and, when they decode, validates the
// graph and runs symbolic shape inference. Errors are fine; panics are not.
func FuzzCompile(f *testing.F) {
	addSeeds(f, func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Decode(data, onnx.Options{MaxTensorBytes: fuzzLimit})
		if err != nil {
			return
		}
		_, _ = Compile(m, Options{MaxTensorBytes: fuzzLimit})
	})
}

// FuzzPlan compiles a model and then plans it for input shapes taken from
// the fuzzer: concrete shape inference and constant folding must reject
// bad shapes with errors, never panic, and never allocate beyond the limit.
func FuzzPlan(f *testing.F) {
	addSeeds(f, func(data []byte) { f.Add(data, []byte{2, 5, 3, 7}) })
	f.Fuzz(func(t *testing.T, data []byte, dims []byte) {
		m, err := onnx.Decode(data, onnx.Options{MaxTensorBytes: fuzzLimit})
		if err != nil {
			return
		}
		p, err := Compile(m, Options{MaxTensorBytes: fuzzLimit})
		if err != nil {
			return
		}
		inputs := map[string]*ir.Tensor{}
		k := 0
		next := func() int {
			if len(dims) == 0 {
				return 1
			}
			d := int(dims[k%len(dims)] % 9)
			k++
			return d
		}
		for _, vi := range m.Graph.Inputs {
			if !vi.Type.DType.Known() || vi.Type.DType == ir.String {
				return
			}
			rank := len(vi.Type.Shape)
			if !vi.Type.RankKnown {
				rank = next() % 4
			}
			shape := make([]int, rank)
			for i := range shape {
				if i < len(vi.Type.Shape) && vi.Type.Shape[i].Known() && next()%4 != 0 {
					shape[i] = int(vi.Type.Shape[i].Value)
				} else {
					shape[i] = next()
				}
			}
			if ir.NumElements(shape) < 0 || ir.NumElements(shape) > 1<<16 {
				return
			}
			inputs[vi.Name] = ir.NewTensor(vi.Type.DType, shape)
		}
		if _, err := p.Plan(inputs); err != nil {
			return
		}
		// Small, valid shapes: running must not panic either (kernel panics
		// are turned into errors by the executor, but should not happen).
		if _, err := p.Run(context.Background(), inputs, RunOptions{}); err != nil {
			if isInternal(err) {
				t.Fatalf("internal error: %v", err)
			}
		}
	})
}

func isInternal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "internal error")
}
