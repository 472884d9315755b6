package ops

import (
	"fmt"
	"slices"

	"github.com/attnrun/attnrun/ir"
)

// ScatterElements and ScatterND: the output is a copy of data with the
// elements that indices address replaced by updates, or combined with them
// by reduction (add, mul from opset 16; max, min from 18; "none", the
// default, replaces). Updates apply in row-major order of indices, so with
// duplicate indices the last one wins under "none", as in ONNX's
// reference; max and min propagate NaN (numpy's maximum and minimum). On
// bool, add and max are "or", mul and min "and"; strings only take "none".
//
// ScatterElements: indices (int32/int64, negative counting from the end)
// has data's rank, updates has indices' shape, and element i of updates
// goes where GatherElements would read element i (gather_elements.go).
// ScatterND: indices' last dim q ≤ rank(data) holds index tuples into
// data's first q dims; updates has shape indices.shape[:-1] +
// data.shape[q:], each tuple replacing one slice. These are the KV-cache
// update ops of exported decoders. Version 13 only adds bfloat16.

func init() {
	for _, op := range []struct {
		name string
		doc  string
		run  func(n *ir.Node, data, ind, upd *ir.Tensor) ([]int, error)
	}{
		{"ScatterElements", "copies data with updates written (or reduced) at positions indices gives along an axis", scatterElementsOffsets},
		{"ScatterND", "copies data with slices addressed by index tuples replaced (or reduced) by updates", scatterNDOffsets},
	} {
		for _, r := range versions(11, 13, 16, 18) {
			since, offsets := r[0], op.run
			Register(&Schema{
				Domain: DomainONNX, OpType: op.name, Since: r[0], Until: r[1],
				MinInputs: 3, MaxInputs: 3, TypeInput: 0, DTypes: anyTypesAt(r[0]),
				Infer: func(n *ir.Node, opset int, in []Value) ([]Value, error) { return inferScatter(n, in, since) },
				Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
					return runScatter(ctx, n, in, since, offsets)
				},
				Doc: op.doc,
			})
		}
	}
}

// scatterReduction reads attribute reduction for the version starting at
// opset since.
func scatterReduction(n *ir.Node, since int) (string, error) {
	r, err := n.AttrString("reduction", "none")
	if err != nil {
		return "", n.Errorf("%w", err)
	}
	switch {
	case r == "none":
	case (r == "add" || r == "mul") && since >= 16, (r == "max" || r == "min") && since >= 18:
	case r == "add" || r == "mul" || r == "max" || r == "min":
		return "", n.Errorf("reduction %q needs a later opset (this node runs %s-%d)", r, n.OpType, since)
	default:
		return "", n.Errorf("reduction %q is not none, add, mul, max or min", r)
	}
	return r, nil
}

func inferScatter(n *ir.Node, in []Value, since int) ([]Value, error) {
	if err := checkInferInputs(n, in, 3); err != nil {
		return nil, err
	}
	data, ind, upd := in[0].Type, in[1].Type, in[2].Type
	if err := checkIndexType(n, "indices", ind.DType); err != nil {
		return nil, err
	}
	if upd.DType != data.DType {
		return nil, n.Errorf("updates is %v, data is %v", upd.DType, data.DType)
	}
	if _, err := scatterReduction(n, since); err != nil {
		return nil, err
	}
	if n.OpType == "ScatterElements" && data.RankKnown {
		if _, err := elementsAxis(n, len(data.Shape)); err != nil {
			return nil, err
		}
	}
	return []Value{{Type: ir.TypeInfo{DType: data.DType, RankKnown: data.RankKnown, Shape: copyShape(data.Shape)}}}, nil
}

func runScatter(ctx *Context, n *ir.Node, in []*ir.Tensor, since int, offsets func(n *ir.Node, data, ind, upd *ir.Tensor) ([]int, error)) ([]*ir.Tensor, error) {
	if err := checkRunInputs(n, in, 3); err != nil {
		return nil, err
	}
	data, ind, upd := in[0], in[1], in[2]
	if err := checkIndexType(n, "indices", ind.DType); err != nil {
		return nil, err
	}
	if upd.DType != data.DType {
		return nil, n.Errorf("updates is %v, data is %v", upd.DType, data.DType)
	}
	red, err := scatterReduction(n, since)
	if err != nil {
		return nil, err
	}
	offs, err := offsets(n, data, ind, upd)
	if err != nil {
		return nil, err
	}
	out := newLike(ctx, data, data.Shape)
	ir.CopyData(out.Data, data.Data)
	if err := scatterInto(out, upd, offs, red); err != nil {
		return nil, n.Errorf("%w", err)
	}
	return []*ir.Tensor{out}, nil
}

// scatterElementsOffsets checks ScatterElements' inputs and returns where
// each update goes.
func scatterElementsOffsets(n *ir.Node, data, ind, upd *ir.Tensor) ([]int, error) {
	if !slices.Equal(ind.Shape, upd.Shape) {
		return nil, n.Errorf("updates has shape %v, indices %v: they must be equal", upd.Shape, ind.Shape)
	}
	return nodeElementOffsets(n, data, ind)
}

// scatterNDOffsets checks ScatterND's inputs and returns where each update
// element goes.
func scatterNDOffsets(n *ir.Node, data, ind, upd *ir.Tensor) ([]int, error) {
	if ind.Rank() < 1 {
		return nil, n.Errorf("indices must have rank 1 or more, got shape %v", ind.Shape)
	}
	q := ind.Shape[ind.Rank()-1]
	if q > data.Rank() {
		return nil, n.Errorf("indices tuples have %d elements, more than data's rank %d", q, data.Rank())
	}
	want := append(append([]int{}, ind.Shape[:ind.Rank()-1]...), data.Shape[q:]...)
	if !slices.Equal(upd.Shape, want) {
		return nil, n.Errorf("updates has shape %v, want %v (indices.shape[:-1] + data.shape[%d:])", upd.Shape, want, q)
	}
	idx, err := ind.AsInt64s()
	if err != nil {
		return nil, n.Errorf("indices: %w", err)
	}
	strides := contiguousStrides(data.Shape)
	block := shapeProd(data.Shape[q:])
	tuples := shapeProd(ind.Shape[:ind.Rank()-1])
	dims := make([]int64, q)
	for j := range dims {
		dims[j] = int64(data.Shape[j])
	}
	offs := make([]int, tuples*block)
	for t := 0; t < tuples; t++ {
		off := 0
		for j, x := range idx[t*q : (t+1)*q] {
			dim := dims[j]
			if x < -dim || x >= dim {
				return nil, n.Errorf("index %d is out of range for axis %d of size %d", x, j, dim)
			}
			if x < 0 {
				x += dim
			}
			off += int(x) * strides[j]
		}
		run := offs[t*block : (t+1)*block]
		for e := range run {
			run[e] = off + e
		}
	}
	return offs, nil
}

// scatterInto writes (red "none") or reduces update i into out at offs[i],
// in order.
func scatterInto(out, upd *ir.Tensor, offs []int, red string) error {
	if red == "none" {
		k, err := kernelsOf(out.Data)
		if err != nil {
			return err
		}
		k.put(out.Data, upd.Data, offs)
		return nil
	}
	switch d := out.Data.(type) {
	case []float32:
		scatterReduce(d, upd.Data.([]float32), offs, red)
	case []float64:
		scatterReduce(d, upd.Data.([]float64), offs, red)
	case []int64:
		scatterReduce(d, upd.Data.([]int64), offs, red)
	case []int32:
		scatterReduce(d, upd.Data.([]int32), offs, red)
	case []int16:
		scatterReduce(d, upd.Data.([]int16), offs, red)
	case []int8:
		scatterReduce(d, upd.Data.([]int8), offs, red)
	case []uint8:
		scatterReduce(d, upd.Data.([]uint8), offs, red)
	case []uint32:
		scatterReduce(d, upd.Data.([]uint32), offs, red)
	case []uint64:
		scatterReduce(d, upd.Data.([]uint64), offs, red)
	case []uint16:
		if out.DType == ir.Uint16 {
			scatterReduce(d, upd.Data.([]uint16), offs, red)
			return nil
		}
		// float16 and bfloat16: reduce in float32, round once per element.
		wide, u := halfValues(out), halfValues(upd)
		scatterReduce(wide, u, offs, red)
		for i, v := range wide {
			if out.DType == ir.BFloat16 {
				d[i] = ir.Float32ToBFloat16(v)
			} else {
				d[i] = ir.Float32ToFloat16(v)
			}
		}
	case []bool:
		u := upd.Data.([]bool)
		for i, o := range offs {
			if red == "add" || red == "max" {
				d[o] = d[o] || u[i]
			} else {
				d[o] = d[o] && u[i]
			}
		}
	default:
		return fmt.Errorf("reduction %q does not apply to %v", red, out.DType)
	}
	return nil
}

// halfValues widens a float16 or bfloat16 tensor to float32.
func halfValues(t *ir.Tensor) []float32 {
	if t.DType == ir.BFloat16 {
		src := t.Data.([]uint16)
		out := make([]float32, len(src))
		for i, v := range src {
			out[i] = ir.BFloat16ToFloat32(v)
		}
		return out
	}
	return halfToFloat32s(t.Data.([]uint16))
}

// scatterReduce combines u[i] into d[offs[i]] in order.
func scatterReduce[T numElem](d, u []T, offs []int, red string) {
	for i, o := range offs {
		a, b := d[o], u[i]
		switch red {
		case "add":
			d[o] = a + b
		case "mul":
			d[o] = a * b
		case "max":
			if b > a || isNaN(b) {
				d[o] = b
			}
		case "min":
			if b < a || isNaN(b) {
				d[o] = b
			}
		}
	}
}

// isNaN reports whether v is a float NaN.
func isNaN[T numElem](v T) bool { return v != v }
