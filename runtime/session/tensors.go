package session

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/attnrun/attnrun/internal/hugepages"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/runtime/graph"
	"gorgonia.org/tensor"
)

// NewTensor returns a zeroed tensor of element type dt and the given shape
// in memory that the session's backend processes share (its tensor arena,
// see plugins/arena.go), like a tensor of ONNX Runtime's IOBinding made by
// a device allocator. A Run passes such a tensor as an input without
// copying it, and an output bound to one (RunOptions.Into) is computed
// straight into it: the host's two copies per tensor through the backend's
// region, which go at memory speed, are gone (RunProfile.InputsShared and
// OutputsShared of a partition name the tensors that took this path).
//
// Give it back with FreeTensor; until then it stays valid, even after
// Close. Its memory counts against Options.MaxMemoryBytes. Where the
// session has no arena (Options.InProcess, where nothing is copied anyway,
// and Options.NoSharedMemory) it is an ordinary tensor (a float32 one of 2
// MiB or more in huge pages, as a backend's own buffers), and FreeTensor
// accepts it all the same. Element types: the fixed-size numeric ones and
// bool (float16 and bfloat16 as uint16, as everywhere in the API).
func (s *Session) NewTensor(dt tensor.Dtype, shape ...int) (*tensor.Dense, error) {
	idt, err := ir.DTypeOfDense(dt)
	if err != nil || idt == ir.String || idt.Size() <= 0 {
		return nil, fmt.Errorf("new tensor: element type %v cannot be shared (fixed-size numbers and bool can)", dt)
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("new tensor: negative dimension in shape %v", shape)
		}
		n *= int64(d)
		if n > s.maxTensorBytes()/int64(idt.Size()) {
			return nil, fmt.Errorf("new tensor: a %v tensor of shape %v is larger than the %d-byte limit on one tensor (Options.MaxTensorBytes)", dt, shape, s.maxTensorBytes())
		}
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	a := s.opts.arena
	if a == nil || n == 0 || len(shape) == 0 {
		// Scalars, empty tensors and sessions without an arena: nothing
		// worth sharing, or nowhere to share it. A float32 tensor of 2
		// MiB or more lies in huge pages where the kernel gives them, as
		// the backend's own buffers do (internal/hugepages): an
		// in-process run reads and writes it as one of its own.
		if idt == ir.Float && n*4 >= hugepages.MinBytes {
			return tensor.New(tensor.WithShape(append([]int{}, shape...)...), tensor.WithBacking(hugepages.Floats(int(n)))), nil
		}
		return tensor.NewDense(dt, tensor.Shape(append([]int{}, shape...))), nil
	}
	raw, err := a.Alloc(n * int64(idt.Size()))
	if err != nil {
		return nil, fmt.Errorf("new tensor: %w", err)
	}
	data, ok := ir.AliasBytes(idt, raw, int(n))
	if !ok && idt == ir.Bool {
		// Zeroed bytes are valid Go bools (false).
		data, ok = unsafe.Slice((*bool)(unsafe.Pointer(unsafe.SliceData(raw))), int(n)), true
	}
	if !ok {
		_ = a.Free(raw)
		return nil, fmt.Errorf("new tensor: element type %v cannot be shared", dt)
	}
	return tensor.New(tensor.WithShape(append([]int{}, shape...)...), tensor.WithBacking(data)), nil
}

// NewTensorFrom is NewTensor with d's element type and shape, holding a
// copy of d's elements; d must be a plain row-major tensor, not a view. A
// scalar or empty d gives an ordinary copy, as NewTensor would.
func (s *Session) NewTensorFrom(d *tensor.Dense) (*tensor.Dense, error) {
	if len(d.Shape()) == 0 || d.Size() == 0 {
		return d.Clone().(*tensor.Dense), nil
	}
	c, err := s.NewTensor(d.Dtype(), d.Shape()...)
	if err != nil {
		return nil, err
	}
	src, dst := ir.BytesOf(d.Data()), ir.BytesOf(c.Data())
	if d.RequiresIterator() || len(src) != len(dst) {
		_ = s.FreeTensor(c)
		return nil, fmt.Errorf("new tensor: a %v tensor of shape %v that is a view cannot be copied (copy it into a plain tensor first)", d.Dtype(), d.Shape())
	}
	copy(dst, src)
	return c, nil
}

// FreeTensor gives back a tensor NewTensor returned: its memory is reused
// once no Run in flight (or abandoned by its context and not yet let go
// by its backend) uses it. Using the tensor after FreeTensor is an error
// like any use after free. Freeing a tensor twice, or one NewTensor did
// not make, is an error.
func (s *Session) FreeTensor(t *tensor.Dense) error {
	if t == nil {
		return errors.New("free tensor: nil tensor")
	}
	a := s.opts.arena
	raw := ir.BytesOf(t.Data()) // nil for a scalar
	if a == nil || len(raw) == 0 {
		return nil
	}
	if err := a.Free(raw); err != nil {
		return fmt.Errorf("free tensor: %w", err)
	}
	return nil
}

// SharedTensorBytes is what the session's tensor arena holds, in bytes
// (its file's size, counted against Options.MaxMemoryBytes): 0 when no
// tensor NewTensor made is live, nor held by a Run abandoned by its
// context whose backend has not yet let go of it; 0 without an arena.
func (s *Session) SharedTensorBytes() int64 {
	if s.opts.arena == nil {
		return 0
	}
	return s.opts.arena.Size()
}

// maxTensorBytes is Options.MaxTensorBytes or its default.
func (s *Session) maxTensorBytes() int64 {
	if s.opts.MaxTensorBytes > 0 {
		return s.opts.MaxTensorBytes
	}
	return graph.DefaultMaxTensorBytes
}
