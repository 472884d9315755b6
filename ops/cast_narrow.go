package ops

import (
	"fmt"
	"math"

	"github.com/attnrun/attnrun/ir"
)

// Conversions to and from the narrow types (see cast.go for the rules).

// widenNarrow returns a narrow tensor's values as float32 (narrow floats) or
// int64 (narrow integers), exactly.
func widenNarrow(t *ir.Tensor) *ir.Tensor {
	if t.DType.NarrowFloat() {
		src := t.Data.([]uint8)
		out := ir.NewTensor(ir.Float, t.Shape)
		d := out.Float32s()
		for i, b := range src {
			d[i] = ir.NarrowFloatToFloat32(t.DType, b)
		}
		return out
	}
	out := ir.NewTensor(ir.Int64, t.Shape)
	d := out.Int64s()
	switch s := t.Data.(type) {
	case []uint8:
		for i, v := range s {
			d[i] = int64(v)
		}
	case []int8:
		for i, v := range s {
			d[i] = int64(v)
		}
	}
	return out
}

// castNarrow converts t into out (same shape) when either type is narrow.
func castNarrow(out, t *ir.Tensor, o castOptions) error {
	src := t
	if t.DType.Narrow() {
		src = widenNarrow(t)
	}
	if !out.DType.Narrow() {
		w, err := castTensor(nil, src, out.DType, o)
		if err != nil {
			return err
		}
		ir.CopyData(out.Data, w.Data)
		return nil
	}
	if out.DType.NarrowFloat() {
		wide, err := castTensor(nil, src, ir.Double, o)
		if err != nil {
			return err
		}
		d := out.Data.([]uint8)
		for i, x := range wide.Data.([]float64) {
			d[i] = narrowFloatOf(out.DType, x, o)
		}
		return nil
	}
	wide, err := castTensor(nil, src, ir.Int64, o)
	if err != nil {
		return err
	}
	vals := wide.Int64s()
	switch d := out.Data.(type) {
	case []uint8:
		for i, v := range vals {
			d[i] = uint8(ir.WrapNarrowInt(out.DType, v))
		}
	case []int8:
		for i, v := range vals {
			d[i] = int8(ir.WrapNarrowInt(out.DType, v))
		}
	default:
		return fmt.Errorf("cannot cast to %v", out.DType)
	}
	return nil
}

// narrowFloatOf converts one value to a narrow float type with Cast's
// options.
func narrowFloatOf(dt ir.DType, x float64, o castOptions) uint8 {
	switch {
	case dt == ir.Float8E8M0:
		return ir.Float32ToFloat8E8M0(float32(x), o.saturate, o.e8m0)
	case o.fnuzInfNaN && o.saturate && math.IsInf(x, 0) && (dt == ir.Float8E4M3FNUZ || dt == ir.Float8E5M2FNUZ):
		return 0x80 // the fnuz encodings' NaN: Cast-19 to 23 saturate finite values only
	}
	return ir.NarrowFloatFrom(dt, x, o.saturate)
}
