package ops

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

func init() {
	// Transpose-1 is Transpose-13 without bfloat16; 21 (which also says
	// that perm must have the input's rank, as attnrun always required), 23,
	// 24 and 25 add narrow types (anyTypesAt).
	for _, r := range versions(1, 13, 21, 23, 24, 25) {
		Register(&Schema{
			Domain: DomainONNX, OpType: "Transpose", Since: r[0], Until: r[1],
			MinInputs: 1, MaxInputs: 1, TypeInput: 0, DTypes: anyTypesAt(r[0]),
			Infer: inferTranspose, Run: runTranspose, RunInto: runTransposeInto,
			Doc: "permutes axes (default: reverses them)",
		})
	}
}

// transposePerm reads perm (default reversed axes) and checks that it is a
// permutation of 0..rank-1.
func transposePerm(n *ir.Node, rank int) ([]int, error) {
	p, ok, err := n.AttrInts("perm")
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	perm := make([]int, rank)
	if !ok {
		for i := range perm {
			perm[i] = rank - 1 - i
		}
		return perm, nil
	}
	bad := func() error {
		return n.Errorf("perm %s is not a permutation of 0..%d", ir.FormatList(p), rank-1)
	}
	if len(p) != rank {
		return nil, bad()
	}
	seen := make([]bool, rank)
	for i, a := range p {
		if a < 0 || a >= int64(rank) || seen[a] {
			return nil, bad()
		}
		seen[a] = true
		perm[i] = int(a)
	}
	return perm, nil
}

func inferTranspose(n *ir.Node, opset int, in []Value) ([]Value, error) {
	if err := checkInferInputs(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if !x.Type.RankKnown {
		if p, ok, _ := n.AttrInts("perm"); ok {
			if _, err := transposePerm(n, len(p)); err != nil {
				return nil, err
			}
			return []Value{Typed(x.Type.DType, unknownDims(len(p)))}, nil
		}
		return []Value{UnknownRank(x.Type.DType)}, nil
	}
	perm, err := transposePerm(n, len(x.Type.Shape))
	if err != nil {
		return nil, err
	}
	out := make(ir.Shape, len(perm))
	for i, p := range perm {
		out[i] = x.Type.Shape[p]
	}
	return []Value{Typed(x.Type.DType, out)}, nil
}

// Transpose permutes t's axes: output axis i is input axis perm[i]. It is the
// kernel behind the Transpose op, exported for backends and graph rewrites.
func Transpose(ctx *Context, t *ir.Tensor, perm []int) (*ir.Tensor, error) {
	shape, err := transposedShape(t, perm)
	if err != nil {
		return nil, err
	}
	out := newLike(ctx, t, shape)
	if err := TransposeInto(ctx, out, t, perm); err != nil {
		return nil, err
	}
	return out, nil
}

func transposedShape(t *ir.Tensor, perm []int) ([]int, error) {
	if len(perm) != t.Rank() {
		return nil, fmt.Errorf("perm %s is not a permutation of 0..%d", ir.FormatList(perm), t.Rank()-1)
	}
	seen := make([]bool, len(perm))
	shape := make([]int, len(perm))
	for i, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			return nil, fmt.Errorf("perm %s is not a permutation of 0..%d", ir.FormatList(perm), t.Rank()-1)
		}
		seen[p] = true
		shape[i] = t.Shape[p]
	}
	return shape, nil
}

// TransposeInto is Transpose writing into dst, a preallocated tensor of t's
// dtype and the permuted shape (so that an executor can reuse buffers).
func TransposeInto(ctx *Context, dst, t *ir.Tensor, perm []int) error {
	shape, err := transposedShape(t, perm)
	if err != nil {
		return err
	}
	if dst.DType != t.DType || !slices.Equal(dst.Shape, shape) || dst.Len() != t.Len() {
		return fmt.Errorf("transpose destination is %v%v, want %v%v", dst.DType, dst.Shape, t.DType, shape)
	}
	k, err := kernelsOf(t.Data)
	if err != nil {
		return err
	}
	if kd, err := kernelsOf(dst.Data); err != nil || kd != k {
		return fmt.Errorf("transpose destination holds %T, source %T", dst.Data, t.Data)
	}
	if t.Len() == 0 {
		return nil
	}
	src := contiguousStrides(t.Shape)
	strides := make([]int, len(perm))
	for i, p := range perm {
		strides[i] = src[p]
	}
	k.strided(dst.Data, t.Data, 0, shape, strides, computeThreads(ctx))
	return nil
}

func runTranspose(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 1); err != nil {
		return nil, err
	}
	perm, err := transposePerm(n, in[0].Rank())
	if err != nil {
		return nil, err
	}
	out, err := Transpose(ctx, in[0], perm)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}

func runTransposeInto(ctx *Context, n *ir.Node, in []*ir.Tensor, out []*ir.Tensor) error {
	if err := checkRunInputs(n, in, 1); err != nil {
		return err
	}
	perm, err := transposePerm(n, in[0].Rank())
	if err != nil {
		return err
	}
	if len(out) < 1 || out[0] == nil {
		return n.Errorf("internal error: no output buffer")
	}
	if err := TransposeInto(ctx, out[0], in[0], perm); err != nil {
		return n.Errorf("%w", err)
	}
	return nil
}
