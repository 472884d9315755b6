package ops

import "github.com/attnrun/attnrun/ir"

// Helpers of the output-into kernel forms (RunIntoFunc).

// checkIntoOutput verifies that out[0] is a buffer of dtype dt and shape
// shape, as the executor's memory plan promises.
func checkIntoOutput(n *ir.Node, out []*ir.Tensor, dt ir.DType, shape []int) error {
	if len(out) < 1 || out[0] == nil || out[0].DType != dt || !SameShape(out[0].Shape, shape) {
		return n.Errorf("internal error: output buffer is not %v%v", dt, shape)
	}
	if err := out[0].Check(); err != nil {
		return n.Errorf("internal error: output buffer: %w", err)
	}
	return nil
}

// copyInto copies src's elements into dst (same dtype and length).
func copyInto(dst, src *ir.Tensor) {
	switch d := dst.Data.(type) {
	case []float32:
		copy(d, src.Data.([]float32))
	case []float64:
		copy(d, src.Data.([]float64))
	case []int64:
		copy(d, src.Data.([]int64))
	case []int32:
		copy(d, src.Data.([]int32))
	case []int16:
		copy(d, src.Data.([]int16))
	case []int8:
		copy(d, src.Data.([]int8))
	case []uint8:
		copy(d, src.Data.([]uint8))
	case []uint16:
		copy(d, src.Data.([]uint16))
	case []uint32:
		copy(d, src.Data.([]uint32))
	case []uint64:
		copy(d, src.Data.([]uint64))
	case []bool:
		copy(d, src.Data.([]bool))
	case []string:
		copy(d, src.Data.([]string))
	}
}
