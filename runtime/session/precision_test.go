package session

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/runtime/conform"
)

// confRunner adapts a session to conform.Runner.
type confRunner struct{ s *Session }

func (r confRunner) InputNames() []string  { return viNames(r.s.Inputs()) }
func (r confRunner) OutputNames() []string { return viNames(r.s.Outputs()) }
func (r confRunner) Close() error          { return r.s.Close() }
func (r confRunner) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	dense := map[string]*tensor.Dense{}
	for name, t := range in {
		d, err := ir.ToDense(t)
		if err != nil {
			return nil, err
		}
		dense[name] = d
	}
	out, err := r.s.Run(ctx, dense)
	if err != nil {
		return nil, err
	}
	res := map[string]*ir.Tensor{}
	for _, vi := range r.s.Outputs() {
		t, err := ir.FromDenseAs(out[vi.Name], vi.Type.DType)
		if err != nil {
			return nil, err
		}
		res[vi.Name] = t
	}
	return res, nil
}

func viNames(vs []*ir.ValueInfo) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}

// TestPrecision opens a bundled model with Options.Precision, in a backend
// process and in process: bf16 runs within conform.BF16Tolerance of
// PyTorch but not within fp32's, and an unknown precision fails Open with
// the backend's reason.
func TestPrecision(t *testing.T) {
	if !blas.BF16Fast() {
		t.Skip("no AVX512_BF16 on this CPU (the backend refuses bf16; backends/cpu tests the refusal)")
	}
	cases, err := conform.Find([]string{"../../models/s000_multi_head"})
	if err != nil {
		t.Fatal(err)
	}
	c := cases[0]
	for _, inProcess := range []bool{false, true} {
		t.Run(fmt.Sprintf("InProcess=%v", inProcess), func(t *testing.T) {
			open := func(precision string) conform.Opener {
				return func(ctx context.Context, path string) (conform.Runner, error) {
					s, err := Open(ctx, path, Options{Logf: t.Logf, Precision: precision, InProcess: inProcess})
					if err != nil {
						return nil, err
					}
					return confRunner{s}, nil
				}
			}
			ctx := context.Background()
			if r := conform.Run(ctx, c, open("bf16"), conform.BF16Tolerance); !r.Pass {
				t.Fatalf("bf16: %v", r.Err)
			}
			if r := conform.Run(ctx, c, open("bf16"), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5}); r.Pass {
				t.Errorf("bf16 matches PyTorch within fp32's tolerance (max abs %g): did the backend multiply in fp32?", r.MaxAbs)
			}
			_, err = Open(ctx, c.Dir+"/model.onnx", Options{Logf: t.Logf, Precision: "fp16", InProcess: inProcess})
			if err == nil || !strings.Contains(err.Error(), `cpu backend: unknown precision "fp16"`) {
				t.Errorf("precision fp16: %v", err)
			}
		})
	}
}
