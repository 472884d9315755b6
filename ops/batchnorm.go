package ops

import (
	"math"

	"github.com/attnrun/attnrun/ir"
)

// BatchNormalization (opsets 1, 6, 7, 9, 14, 15): X of shape [N, C, D1, …]
// normalized per channel with given statistics, (x - input_mean[c]) /
// sqrt(input_var[c] + epsilon) · scale[c] + B[c], all four of shape [C].
// That is inference, what nn.BatchNorm1d/2d export in eval mode, and the
// kernel is one pass over X (a shift and a scale per channel).
//
// From opset 14, training_mode=1 normalizes with the batch's own statistics
// (the mean and population variance over N and the spatial dims, per
// channel) and the optional outputs running_mean and running_var are
// input_mean·momentum + batch mean·(1 - momentum) (likewise the variance),
// as ONNX's reference computes them. Before 14, training is signalled by
// more than one output (7, 9) or is_test=0 (1, 6); attnrun refuses those
// nodes, and spatial=0 (per-activation statistics, before 9), with an
// error naming the node.
//
// Types: every input of one float type before 14; from 14 the statistics
// may have their own type (input_mean and input_var alike), and from 15
// scale and B too. Versions 1 and 6 differ only in opset 1's
// consumed_inputs attribute (ignored).

func init() {
	for _, r := range versions(1, 6, 7, 9, 14, 15) {
		since := r[0]
		maxOut := 5
		doc := "(x - input_mean) / sqrt(input_var + epsilon) * scale + B per channel (inference)"
		if since >= 14 {
			maxOut = 3
			doc = "(x - mean) / sqrt(var + epsilon) * scale + B per channel: input_mean/input_var, or the batch's with training_mode=1"
		}
		Register(&Schema{
			Domain: DomainONNX, OpType: "BatchNormalization", Since: since, Until: r[1],
			MinInputs: 5, MaxInputs: 5, TypeInput: 0, DTypes: FloatTypes,
			Infer: func(n *ir.Node, _ int, in []Value) ([]Value, error) {
				_, out, err := inferBatchNorm(n, in, since, maxOut)
				return out, err
			},
			Run: func(ctx *Context, n *ir.Node, in []*ir.Tensor) ([]*ir.Tensor, error) {
				return runBatchNorm(ctx, n, in, since, maxOut)
			},
			Doc: doc,
			Notes: []string{
				"before opset 14 only inference: one output, is_test=1 (opsets 1 and 6) and spatial=1; other nodes are refused.",
			},
		})
	}
}

// batchNormAttrs are BatchNormalization's attributes.
type batchNormAttrs struct {
	epsilon, momentum float64
	training          bool // training_mode=1 (opset ≥ 14)
}

// batchNormNames names BatchNormalization's inputs.
var batchNormNames = []string{"X", "scale", "B", "input_mean", "input_var"}

func parseBatchNorm(n *ir.Node, since, maxOut int) (batchNormAttrs, error) {
	var a batchNormAttrs
	var err error
	if a.epsilon, err = normEpsilon(n); err != nil {
		return a, err
	}
	m, err := n.AttrFloat("momentum", 0.9)
	if err != nil {
		return a, n.Errorf("%w", err)
	}
	a.momentum = float64(m)
	if len(n.Outputs) > maxOut {
		return a, n.Errorf("has %d outputs, at most %d", len(n.Outputs), maxOut)
	}
	extra := false // an output beyond Y is named
	for _, o := range n.Outputs[min(1, len(n.Outputs)):] {
		extra = extra || o != ""
	}
	if since >= 14 {
		mode, err := n.AttrInt("training_mode", 0)
		if err != nil {
			return a, n.Errorf("%w", err)
		}
		if mode != 0 && mode != 1 {
			return a, n.Errorf("training_mode must be 0 or 1, got %d", mode)
		}
		a.training = mode == 1
		if extra && !a.training {
			return a, n.Errorf("outputs running_mean and running_var exist only in training mode (training_mode=1)")
		}
		return a, nil
	}
	if since < 9 {
		if spatial, err := n.AttrInt("spatial", 1); err != nil {
			return a, n.Errorf("%w", err)
		} else if spatial != 1 {
			return a, n.Errorf("spatial=%d (statistics per activation rather than per channel) is not supported", spatial)
		}
	}
	if since < 7 {
		if test, err := n.AttrInt("is_test", 0); err != nil {
			return a, n.Errorf("%w", err)
		} else if test == 0 {
			return a, n.Errorf("is_test=0 (training mode) is not supported before opset 7; attnrun runs is_test=1 (inference)")
		}
	}
	if extra {
		return a, n.Errorf("training mode (outputs mean, var, saved_mean, saved_var) is not supported before opset 14")
	}
	return a, nil
}

func inferBatchNorm(n *ir.Node, in []Value, since, maxOut int) (batchNormAttrs, []Value, error) {
	a, err := parseBatchNorm(n, since, maxOut)
	if err != nil {
		return a, nil, err
	}
	same := [][]int{{0, 1, 2, 3, 4}}
	switch {
	case since >= 15:
		same = [][]int{{1, 2}, {3, 4}}
	case since >= 14:
		same = [][]int{{0, 1, 2}, {3, 4}}
	}
	out, err := inferChannelNorm(n, in, batchNormNames, 1, true, same...)
	if err != nil {
		return a, nil, err
	}
	c := ir.UnknownDim
	if x := in[0].Type; x.RankKnown {
		c = x.Shape[1]
	}
	for range n.Outputs[min(1, len(n.Outputs)):] {
		if !a.training { // an omitted optional output ("")
			out = append(out, Value{})
			continue
		}
		out = append(out, Typed(in[3].Type.DType, ir.Shape{c}))
	}
	return a, out, nil
}

func runBatchNorm(ctx *Context, n *ir.Node, in []*ir.Tensor, since, maxOut int) ([]*ir.Tensor, error) {
	if err := checkComputeInputs(n, in, 5); err != nil {
		return nil, err
	}
	a, _, err := inferBatchNorm(n, constValues(in), since, maxOut)
	if err != nil {
		return nil, err
	}
	x := in[0]
	c := x.Shape[1]
	scale, bias := floats64Of(in[1]), floats64Of(in[2])
	mean, variance := floats64Of(in[3]), floats64Of(in[4])
	y, err := newOutput(ctx, x.DType, x.Shape)
	if err != nil {
		return nil, n.Errorf("%w", err)
	}
	outs := []*ir.Tensor{y}
	if a.training {
		batchMean, batchVar := batchStats(x)
		for i, v := range [][2][]float64{{mean, batchMean}, {variance, batchVar}} {
			if len(n.Outputs) <= 1+i {
				break
			}
			running := make([]float64, c)
			for ch := range running {
				running[ch] = v[0][ch]*a.momentum + v[1][ch]*(1-a.momentum)
			}
			outs = append(outs, float64sAs(in[3+i].DType, []int{c}, running))
		}
		mean, variance = batchMean, batchVar
	}
	for len(outs) < len(n.Outputs) { // omitted optional outputs ("")
		outs = append(outs, nil)
	}
	// y = (x - mean)·mul + B, mul = scale / sqrt(var + epsilon).
	mul := make([]float64, c)
	for ch := range mul {
		mul[ch] = scale[ch] / math.Sqrt(variance[ch]+a.epsilon)
	}
	forEachRow(ctx, x, y, ShapeElems(x.Shape[2:]),
		batchNormRow[float32](c, mean, mul, bias), batchNormRow[float64](c, mean, mul, bias))
	return outs, nil
}

// batchNormRow returns the row kernel of BatchNormalization: row r holds
// the spatial positions of channel r % channels of one sample.
func batchNormRow[T float32 | float64](channels int, mean, mul, bias []float64) func(r int, y, x []T) {
	return func(r int, y, x []T) {
		ch := r % channels
		shiftScale(y, x, T(mean[ch]), T(mul[ch]), T(bias[ch]))
	}
}

// batchStats returns the mean and population variance of each channel of x
// (of shape [N, C, …]) over N and the spatial dims, two passes in float64.
func batchStats(x *ir.Tensor) (mean, variance []float64) {
	xs := floats64Of(x)
	n, c, spatial := x.Shape[0], x.Shape[1], ShapeElems(x.Shape[2:])
	count := float64(n * spatial)
	mean, variance = make([]float64, c), make([]float64, c)
	for ch := range c {
		rows := func(f func(v float64)) {
			for s := range n {
				for _, v := range xs[(s*c+ch)*spatial : (s*c+ch+1)*spatial] {
					f(v)
				}
			}
		}
		var sum, sq float64
		rows(func(v float64) { sum += v })
		mu := sum / count
		rows(func(v float64) { sq += (v - mu) * (v - mu) })
		mean[ch], variance[ch] = mu, sq/count
	}
	return mean, variance
}

// float64sAs returns a tensor of float type dt and the given shape holding
// v (rounded to dt).
func float64sAs(dt ir.DType, shape []int, v []float64) *ir.Tensor {
	t := ir.NewTensor(dt, shape)
	if d, ok := t.Data.([]float64); ok {
		copy(d, v)
		return t
	}
	f := make([]float32, len(v))
	for i, e := range v {
		f[i] = float32(e)
	}
	writeFloats(t, 0, f)
	return t
}
