package session

import (
	"context"
	"fmt"

	"gorgonia.org/tensor"

	"github.com/attnrun/attnrun/ir"
)

// RunIR is RunWith on ir tensors, for callers that hold their data as
// ir.Tensor values (the CLI's .npy and .pb files, a server's requests): the
// inputs are converted to Dense values sharing their memory (ToDense), and
// the outputs back to ir tensors of the model's declared types (float16
// and bfloat16 outputs from their uint16 bit patterns), also sharing
// memory. Values that are not graph outputs (Options.ExtraOutputs,
// AttentionWeights) keep their element types.
func (s *Session) RunIR(ctx context.Context, in map[string]*ir.Tensor, ro RunOptions) (map[string]*ir.Tensor, error) {
	dense, err := ToDense(in)
	if err != nil {
		return nil, err
	}
	out, err := s.RunWith(ctx, dense, ro)
	if err != nil {
		return nil, err
	}
	res := make(map[string]*ir.Tensor, len(out))
	for _, vi := range s.Outputs() {
		d, ok := out[vi.Name]
		if !ok {
			return nil, fmt.Errorf("output %q missing from the backend's reply", vi.Name)
		}
		t, err := ir.FromDenseAs(d, vi.Type.DType)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", vi.Name, err)
		}
		res[vi.Name] = t
	}
	for name, d := range out {
		if _, ok := res[name]; !ok {
			t, err := ir.FromDense(d)
			if err != nil {
				return nil, fmt.Errorf("value %q: %w", name, err)
			}
			res[name] = t
		}
	}
	return res, nil
}

// ToDense converts named ir tensors to the Dense values Run takes, sharing
// their memory; an error names the tensor.
func ToDense(in map[string]*ir.Tensor) (map[string]*tensor.Dense, error) {
	dense := make(map[string]*tensor.Dense, len(in))
	for name, t := range in {
		d, err := ir.ToDense(t)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", name, err)
		}
		dense[name] = d
	}
	return dense, nil
}
