package gpu

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/attnrun/attnrun/ir"
)

// tensorBytes views a tensor's elements as little-endian bytes (no copy).
// Bool tensors are one byte per element, 0 or 1, as on the device.
func tensorBytes(t *ir.Tensor) ([]byte, error) {
	n := t.Len()
	if n == 0 {
		return nil, nil
	}
	var p unsafe.Pointer
	switch d := t.Data.(type) {
	case []float32:
		p = unsafe.Pointer(&d[0])
	case []float64:
		p = unsafe.Pointer(&d[0])
	case []int64:
		p = unsafe.Pointer(&d[0])
	case []int32:
		p = unsafe.Pointer(&d[0])
	case []uint8:
		p = unsafe.Pointer(&d[0])
	case []bool:
		p = unsafe.Pointer(&d[0])
	default:
		return nil, fmt.Errorf("element type %v is not supported on the gpu backend", t.DType)
	}
	return unsafe.Slice((*byte)(p), n*t.DType.Size()), nil
}

// newHostTensor allocates a tensor and returns it with a byte view of its
// elements to download into.
func newHostTensor(dt ir.DType, shape []int) (*ir.Tensor, []byte, error) {
	switch dt {
	case ir.Float, ir.Double, ir.Int64, ir.Int32, ir.Uint8, ir.Bool:
	default:
		return nil, nil, fmt.Errorf("element type %v is not supported on the gpu backend", dt)
	}
	if n := ir.NumElements(shape); n < 0 {
		return nil, nil, fmt.Errorf("invalid shape %v", shape)
	}
	t := ir.NewTensor(dt, shape)
	b, err := tensorBytes(t)
	return t, b, err
}

// shapeKey identifies a set of concrete input shapes (one plan each).
func shapeKey(names []string, inputs map[string]*ir.Tensor) string {
	var b strings.Builder
	for _, n := range names {
		if t := inputs[n]; t != nil {
			b.WriteString(ir.ShapeString(t.Shape))
		}
		b.WriteByte(';')
	}
	return b.String()
}
