package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

func init() {
	// Concat-1's axis defaults to 1 (4 makes it required); 11 allows a
	// negative axis, 13 adds bfloat16.
	for _, r := range versions(1, 4, 11, 13) {
		since := r[0]
		Register(&Schema{
			Domain: DomainONNX, OpType: "Concat", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: -1, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferConcat(n, in, since) },
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runConcat(ctx, n, in, since)
			},
			// Into the output's buffer: a KV cache's Concat (a decode
			// step's present key and value, graph outputs) then writes
			// straight into the shared region, with no zeroing first.
			RunInto: func(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
				return runConcatInto(ctx, n, in, out, since)
			},
			Doc: "joins tensors along an axis",
		})
	}
}

// concatAxis reads and normalizes the axis attribute of the Concat version
// starting at opset since: required from 4 on, 1 by default before.
func concatAxis(n *ir.Node, rank int, since int) (int, error) {
	if n.Attr("axis") == nil && since >= 4 {
		return 0, n.Errorf("attribute axis is required")
	}
	a, err := n.AttrInt("axis", 1)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	if a < 0 && since < 11 {
		return 0, n.Errorf("negative axis %d needs opset 11 or later", a)
	}
	if rank == 0 {
		return 0, n.Errorf("cannot concatenate scalars")
	}
	ax, err := NormAxis(a, rank)
	if err != nil {
		return 0, n.Errorf("%w", err)
	}
	return ax, nil
}

func inferConcat(n *ir.Node, in []Value, since int) ([]Value, error) {
	if len(in) == 0 {
		return nil, n.Errorf("needs at least one input")
	}
	dt := in[0].Type.DType
	rank := -1
	for i, v := range in {
		if !v.Present() {
			return nil, n.Errorf("input %d is missing", i)
		}
		if v.Type.DType != dt {
			return nil, n.Errorf("input %d is %v, input 0 is %v", i, v.Type.DType, dt)
		}
		if v.Type.RankKnown {
			if rank >= 0 && len(v.Type.Shape) != rank {
				return nil, n.Errorf("input %d has rank %d, want %d", i, len(v.Type.Shape), rank)
			}
			rank = len(v.Type.Shape)
		}
	}
	if rank < 0 {
		if _, err := concatAxis(n, 1, since); err != nil {
			return nil, err
		}
		return []Value{UnknownRank(dt)}, nil
	}
	axis, err := concatAxis(n, rank, since)
	if err != nil {
		return nil, err
	}
	out := unknownDims(rank)
	var along []ir.Dim // the inputs' dims on the axis
	allRanks := true
	for i, v := range in {
		if !v.Type.RankKnown {
			allRanks = false
			continue
		}
		for k, d := range v.Type.Shape {
			if k == axis {
				continue
			}
			o := out[k]
			switch {
			case d.Known() && o.Known() && d.Value != o.Value:
				return nil, n.Errorf("input %d has shape %v, which does not match %v off axis %d", i, v.Type.Shape, out, axis)
			case d.Known(), o == ir.UnknownDim:
				out[k] = d
			}
		}
		along = append(along, v.Type.Shape[axis])
	}
	if allRanks {
		out[axis] = SymSum(along...)
	}
	if rank == 1 && (dt == ir.Int64 || dt == ir.Int32) {
		// Inputs of known length but unknown contents contribute unknown
		// elements, so that one computed dim (say batch*heads) does not
		// hide the others.
		var sym ir.Shape
		ok, some := true, false
		for _, v := range in {
			if s, has := SymOf(v); has {
				sym = append(sym, s...)
				some = true
			} else if l, known := vectorLen(v); known {
				sym = append(sym, unknownDims(l)...)
			} else {
				ok = false
				break
			}
		}
		if ok && some && len(sym) <= maxSymLen {
			return []Value{symValue(dt, sym, false)}, nil
		}
	}
	return []Value{Typed(dt, out)}, nil
}

func runConcat(ctx *Context, n *ir.Node, in []*ir.Tensor, since int) ([]*ir.Tensor, error) {
	axis, shape, err := concatShape(n, in, since)
	if err != nil {
		return nil, err
	}
	out := newLike(ctx, in[0], shape)
	if err := concatInto(computeThreads(ctx), n, out, in, axis); err != nil {
		return nil, err
	}
	return []*ir.Tensor{out}, nil
}

// runConcatInto is Concat's RunInto: the inputs joined into out[0], whose
// shape must be the joined shape.
func runConcatInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor, since int) error {
	axis, shape, err := concatShape(n, in, since)
	if err != nil {
		return err
	}
	if len(out) < 1 || out[0] == nil {
		return n.Errorf("internal error: no output buffer")
	}
	if !SameShape(out[0].Shape, shape) || out[0].DType != in[0].DType {
		return n.Errorf("internal error: output buffer %v%v, the inputs join to %v%v", out[0].DType, out[0].Shape, in[0].DType, shape)
	}
	return concatInto(computeThreads(ctx), n, out[0], in, axis)
}

// concatShape validates Concat's inputs and returns the normalized axis
// and the joined shape.
func concatShape(n *ir.Node, in []*ir.Tensor, since int) (int, []int, error) {
	if len(in) == 0 {
		return 0, nil, n.Errorf("needs at least one input")
	}
	if err := checkRunInputs(n, in, len(in)); err != nil {
		return 0, nil, err
	}
	first := in[0]
	axis, err := concatAxis(n, first.Rank(), since)
	if err != nil {
		return 0, nil, err
	}
	shape := append([]int{}, first.Shape...)
	shape[axis] = 0
	for i, t := range in {
		if t.DType != first.DType {
			return 0, nil, n.Errorf("input %d is %v, input 0 is %v", i, t.DType, first.DType)
		}
		if err := sameOffAxis(first.Shape, t.Shape, axis); err != nil {
			return 0, nil, n.Errorf("input %d: %w", i, err)
		}
		shape[axis] += t.Shape[axis]
	}
	return axis, shape, nil
}

// concatParallelMin is the fewest elements a thread of a Concat moves.
// A decode step's KV cache is one large Concat per key and value (past
// then the new token: 8.4 MB each for 16 heads of 64 after 2047 tokens),
// which one core copies at what one core's share of the memory bandwidth
// allows: copying that cache's 16 blocks of 2047·64 floats took 454 µs on
// one goroutine and 192 on two with the source in cache, 1004 and 828
// from memory (a throwaway program, medians of 40, 2-core Zen 4 VM,
// 2026-11-28).
const concatParallelMin = 1 << 18

// concatInto writes the inputs one after another along axis into out,
// every element of it, on up to threads goroutines where out is large:
// each takes a share of the outer blocks (or, with fewer blocks than
// goroutines, of each block's elements) of every input.
func concatInto(threads int, n *ir.Node, out *ir.Tensor, in []*ir.Tensor, axis int) error {
	shape := out.Shape
	total := shapeProd(shape)
	if total == 0 {
		return nil
	}
	k, err := kernelsOf(in[0].Data)
	if err != nil {
		return n.Errorf("%w", err)
	}
	outer, inner := shapeProd(shape[:axis]), shapeProd(shape[axis+1:])
	dStride := shape[axis] * inner
	tasks := max(1, min(threads, total/concatParallelMin))
	parallel.Run(tasks, func(task int) {
		off := 0
		for _, t := range in {
			l := t.Shape[axis] * inner
			switch {
			case l == 0:
			case outer >= tasks: // blocks [o0, o1) of this input
				o0, o1 := task*outer/tasks, (task+1)*outer/tasks
				if o1 > o0 {
					k.blocks(out.Data, off+o0*dStride, dStride, t.Data, o0*l, l, o1-o0, l)
				}
			default: // elements [e0, e1) of every block
				e0, e1 := task*l/tasks, (task+1)*l/tasks
				if e1 > e0 {
					k.blocks(out.Data, off+e0, dStride, t.Data, e0, l, outer, e1-e0)
				}
			}
			off += l
		}
	})
	return nil
}

// sameOffAxis checks that two shapes agree in rank and in every dim but axis.
func sameOffAxis(a, b []int, axis int) error {
	if len(a) != len(b) {
		return fmt.Errorf("shape %v has rank %d, want %d like %v", b, len(b), len(a), a)
	}
	for i := range a {
		if i != axis && a[i] != b[i] {
			return fmt.Errorf("shape %v does not match %v off axis %d", b, a, axis)
		}
	}
	return nil
}
