package plugins

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
	"gorgonia.org/tensor"
)

// Output binding: a caller may hand Run its own tensors for some outputs
// (like ONNX Runtime's IOBinding), so that a loop of runs writes its results
// into the same memory instead of allocating, zeroing and faulting in new
// memory every time.

// bindTarget returns the caller's tensor dst as an ir.Tensor sharing dst's
// memory, after checking that it can hold a dt tensor of shape dims.
func bindTarget(dst *tensor.Dense, dt ir.DType, dims []int) (*ir.Tensor, error) {
	if dst.RequiresIterator() || dst.IsMasked() || !dst.DataOrder().IsRowMajor() {
		return nil, fmt.Errorf("the bound tensor is a view, masked or column-major; bind a plain row-major tensor")
	}
	if len(dst.Shape()) == 0 || len(dims) == 0 {
		return nil, fmt.Errorf("scalar outputs cannot be bound")
	}
	target, err := ir.FromDenseAs(dst, dt)
	if err != nil {
		return nil, fmt.Errorf("the bound tensor cannot hold %v: %w", dt, err)
	}
	if !slices.Equal(target.Shape, dims) {
		return nil, fmt.Errorf("the bound tensor has shape %v, the output has %v", target.Shape, dims)
	}
	return target, nil
}

// BindOutput copies t into the caller's tensor dst, which must have t's
// element type and shape (float16 and bfloat16 in a uint16 Dense).
func BindOutput(dst *tensor.Dense, t *ir.Tensor) error {
	if dst == nil {
		return fmt.Errorf("no tensor to write into")
	}
	target, err := bindTarget(dst, t.DType, t.Shape)
	if err != nil {
		return err
	}
	if ir.NumElements(t.Shape) > 0 {
		ir.CopyData(target.Data, t.Data)
	}
	return nil
}

// plainBytes reports whether a dt tensor's wire bytes are its memory as is:
// a fixed-size type other than bool (which the wire normalizes to 0 or 1).
func plainBytes(dt ir.DType) bool {
	return dt.Known() && dt != ir.String && dt != ir.Bool
}

// copyShmInto copies the shared-memory tensor w from mem (the region, or
// the arena) into the caller's tensor dst, with up to threads threads (see
// copyBytes). copied is false when w already lies in dst's own memory (an
// output computed into its bound tensor in the arena): nothing to copy.
func copyShmInto(dst *tensor.Dense, w *backendpb.Tensor, mem []byte, threads int) (copied bool, err error) {
	raw, err := shmBytes(w, mem)
	if err != nil {
		return false, err
	}
	target, err := bindTarget(dst, ir.DType(w.Dtype), wireDims(w))
	if err != nil {
		return false, err
	}
	b := bytesOf(target.Data)
	switch {
	case len(b) != len(raw):
		return false, fmt.Errorf("%d bytes in shared memory for a %d-byte tensor", len(raw), len(b))
	case len(b) > 0 && &b[0] == &raw[0]:
		return false, nil
	}
	copyBytes(b, raw, threads)
	return true, nil
}
