package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
)

// Where(condition, X, Y) picks X where condition is true and Y elsewhere,
// broadcasting all three. Where-16 only adds bfloat16, which attnrun does
// not take here.

func init() {
	for _, r := range versions(9, 16) {
		Register(&Schema{
			OpType: "Where", Since: r[0], Until: r[1], MinInputs: 3, MaxInputs: 3,
			TypeInput: 1, DTypes: AllTypes,
			Infer: inferWhere,
			Run:   runWhere,
			Doc:   "elementwise select: condition ? X : Y, with three-way broadcasting",
		})
	}
}

func inferWhere(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := needValues(n, in, 3); err != nil {
		return nil, err
	}
	if dt := in[0].Type.DType; dt != ir.Bool {
		return nil, n.Errorf("condition has element type %v, want bool", dt)
	}
	dt, err := sameValueTypes(n, in[1:3])
	if err != nil {
		return nil, err
	}
	if err := checkType(n, "X", dt, AllTypes); err != nil {
		return nil, err
	}
	v, err := broadcastValue(n, dt, in[:3])
	if err != nil {
		return nil, err
	}
	// A known condition selecting between shape vectors known
	// symbolically (PyTorch's expand: Where(Equal(shape, -1), 1, shape))
	// gives a shape vector known symbolically.
	c := in[0].Const
	x, okX := SymOf(in[1])
	y, okY := SymOf(in[2])
	if c != nil && okX && okY && symVector(in[0]) && symVector(in[1]) && symVector(in[2]) && v.Type.RankKnown {
		size := max(c.Len(), len(x), len(y))
		fits := func(l int) bool { return l == size || l == 1 }
		if fits(c.Len()) && fits(len(x)) && fits(len(y)) {
			sym := make(ir.Shape, size)
			for i := range sym {
				if c.Bools()[min(i, c.Len()-1)] {
					sym[i] = x[min(i, len(x)-1)]
				} else {
					sym[i] = y[min(i, len(y)-1)]
				}
			}
			return []Value{symValue(dt, sym, len(v.Type.Shape) == 0)}, nil
		}
	}
	return []Value{v}, nil
}

func runWhere(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkTensors(n, in, 3); err != nil {
		return nil, err
	}
	c, x, y := in[0], in[1], in[2]
	if c.DType != ir.Bool {
		return nil, n.Errorf("condition has element type %v, want bool", c.DType)
	}
	dt, err := sameTensorTypes(n, in[1:3])
	if err != nil {
		return nil, err
	}
	shape, err := broadcastOf(n, c, x, y)
	if err != nil {
		return nil, err
	}
	out, err := newOutput(ctx, dt, shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	cond := c.Data.([]bool)
	threads := computeThreads(ctx)
	switch o := out.Data.(type) {
	case []float32:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]float32), x.Shape, y.Data.([]float32), y.Shape)
	case []float64:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]float64), x.Shape, y.Data.([]float64), y.Shape)
	case []int64:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]int64), x.Shape, y.Data.([]int64), y.Shape)
	case []int32:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]int32), x.Shape, y.Data.([]int32), y.Shape)
	case []int16:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]int16), x.Shape, y.Data.([]int16), y.Shape)
	case []int8:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]int8), x.Shape, y.Data.([]int8), y.Shape)
	case []uint8:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]uint8), x.Shape, y.Data.([]uint8), y.Shape)
	case []uint16: // uint16 and float16
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]uint16), x.Shape, y.Data.([]uint16), y.Shape)
	case []uint32:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]uint32), x.Shape, y.Data.([]uint32), y.Shape)
	case []uint64:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]uint64), x.Shape, y.Data.([]uint64), y.Shape)
	case []bool:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]bool), x.Shape, y.Data.([]bool), y.Shape)
	case []string:
		err = where(threads, o, shape, cond, c.Shape, x.Data.([]string), x.Shape, y.Data.([]string), y.Shape)
	default:
		err = fmt.Errorf("unsupported element type %v", dt)
	}
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}

// whereParallelMin is the fewest output elements worth a thread of their
// own.
const whereParallelMin = 1 << 15

// where fills o (of shape oShape, the broadcast of the three input shapes)
// on up to threads threads.
func where[T any](threads int, o []T, oShape []int, c []bool, cShape []int, x []T, xShape []int, y []T, yShape []int) error {
	if len(o) == 0 {
		return nil
	}
	if len(c) == len(o) && len(x) == len(o) && len(y) == len(o) {
		computeParallel(threads, len(o), whereParallelMin, func(lo, hi int) {
			whereSpan(o[lo:hi], c, lo, 1, x, lo, 1, y, lo, 1)
		})
		return nil
	}
	br, err := NewBroadcaster(oShape, cShape, xShape, yShape)
	if err != nil {
		return err
	}
	sc, sx, sy := br.InnerStride(0), br.InnerStride(1), br.InnerStride(2)
	computeParallel(threads, len(o), whereParallelMin, func(lo, hi int) {
		br.ForEachSpan(lo, hi, func(off, n int, offs []int) {
			whereSpan(o[off:off+n], c, offs[0], sc, x, offs[1], sx, y, offs[2], sy)
		})
	})
	return nil
}

// whereSpan fills o from a run of the condition, X and Y starting at ic,
// ix and iy, each with a step of 0 (one element for the run) or 1. Each
// form has its own loop, without the steps' multiplications: a masked
// fill of [2048, 2048] scores (BenchmarkWhereMaskedFill) ran in 2.2-2.6 ms
// on 2 threads against 3.8-4.3 through one loop with the steps.
func whereSpan[T any](o []T, c []bool, ic, sc int, x []T, ix, sx int, y []T, iy, sy int) {
	n := len(o)
	if sc == 0 { // one condition for the whole run: copy or fill
		src, s, i := y, sy, iy
		if c[ic] {
			src, s, i = x, sx, ix
		}
		if s == 1 {
			copy(o, src[i:i+n])
			return
		}
		v := src[i]
		for j := range o {
			o[j] = v
		}
		return
	}
	cr := c[ic : ic+n]
	switch {
	case sx == 1 && sy == 1:
		xr, yr := x[ix:ix+n], y[iy:iy+n]
		for j, b := range cr {
			if b {
				o[j] = xr[j]
			} else {
				o[j] = yr[j]
			}
		}
	case sx == 0 && sy == 1:
		v, yr := x[ix], y[iy:iy+n]
		for j, b := range cr {
			if b {
				o[j] = v
			} else {
				o[j] = yr[j]
			}
		}
	case sx == 1 && sy == 0:
		xr, v := x[ix:ix+n], y[iy]
		for j, b := range cr {
			if b {
				o[j] = xr[j]
			} else {
				o[j] = v
			}
		}
	default:
		vx, vy := x[ix], y[iy]
		for j, b := range cr {
			if b {
				o[j] = vx
			} else {
				o[j] = vy
			}
		}
	}
}

// Output-into form of Where for executors with a memory plan (see
// RunIntoFunc).
func init() {
	for _, s := range registered(DomainONNX, "Where") {
		s.RunInto = runWhereInto
	}
}

func runWhereInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	if err := checkTensors(n, in, 3); err != nil {
		return err
	}
	c, x, y := in[0], in[1], in[2]
	if c.DType != ir.Bool {
		return n.Errorf("condition has element type %v, want bool", c.DType)
	}
	dt, err := sameTensorTypes(n, in[1:3])
	if err != nil {
		return err
	}
	shape, err := broadcastOf(n, c, x, y)
	if err != nil {
		return err
	}
	if err := checkIntoOutput(n, out, dt, shape); err != nil {
		return err
	}
	if o, ok := out[0].Data.([]float32); ok {
		err = where(computeThreads(ctx), o, shape, c.Data.([]bool), c.Shape, x.Data.([]float32), x.Shape, y.Data.([]float32), y.Shape)
		if err != nil {
			return n.Errorf("%w", err)
		}
		return nil
	}
	res, err := runWhere(ctx, n, in)
	if err != nil {
		return err
	}
	copyInto(out[0], res[0])
	return nil
}
