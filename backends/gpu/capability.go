package gpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/plugins"
)

// Element types that live on the device.
var (
	f32Only   = []ir.DType{ir.Float}
	numeric   = []ir.DType{ir.Float, ir.Int64, ir.Int32}
	intFloat  = []ir.DType{ir.Float, ir.Int64, ir.Int32}
	boolOnly  = []ir.DType{ir.Bool}
	eqTypes   = []ir.DType{ir.Float, ir.Int64, ir.Int32, ir.Bool}
	addTypes  = []ir.DType{ir.Float, ir.Int64, ir.Int32, ir.Bool} // bool Add is logical or (PyTorch)
	anyDevice = []ir.DType{ir.Float, ir.Double, ir.Int64, ir.Int32, ir.Bool, ir.Uint8}
	castTypes = anyDevice
	unaryI64  = []ir.DType{ir.Float, ir.Int64}
)

// opRule says which element types an op takes on the GPU, at which input.
type opRule struct {
	typeInput int        // input whose element type is checked
	dtypes    []ir.DType // nil: any (shape-only ops that run on the host)
	note      string     // how it runs, for Info and the README
}

// rules is the GPU backend's op table (default domain unless prefixed).
var rules = map[string]opRule{
	"Add": {0, addTypes, "elementwise, broadcasting"}, "Sub": {0, numeric, "elementwise"},
	"Mul": {0, numeric, "elementwise"}, "Div": {0, numeric, "elementwise"}, "Pow": {0, f32Only, "elementwise"},
	"Equal": {0, eqTypes, "elementwise → bool"}, "Less": {0, intFloat, "elementwise → bool"},
	"Greater": {0, intFloat, "elementwise → bool"}, "LessOrEqual": {0, intFloat, "elementwise → bool"},
	"GreaterOrEqual": {0, intFloat, "elementwise → bool"},
	"And":            {0, boolOnly, "elementwise"}, "Or": {0, boolOnly, "elementwise"}, "Xor": {0, boolOnly, "elementwise"},
	"Not": {0, boolOnly, "elementwise"}, "Where": {1, anyDevice, "elementwise select"},
	"Sqrt": {0, f32Only, "elementwise"}, "Erf": {0, f32Only, "elementwise"}, "Neg": {0, unaryI64, "elementwise"},
	"Exp": {0, f32Only, "elementwise"}, "Tanh": {0, f32Only, "elementwise"}, "Relu": {0, unaryI64, "elementwise"},
	"Abs": {0, unaryI64, "elementwise"}, "Reciprocal": {0, f32Only, "elementwise"},
	"Sigmoid": {0, f32Only, "elementwise"}, "Log": {0, f32Only, "elementwise"},
	"Cast":               {0, castTypes, "elementwise conversion"},
	"Softmax":            {0, f32Only, "one block per row"},
	"LayerNormalization": {0, f32Only, "one block per row"},
	"MatMul":             {0, f32Only, "cublasSgemmStridedBatched"},
	"Gemm":               {0, f32Only, "cublasSgemmStridedBatched"},
	"Transpose":          {0, anyDevice, "strided copy"}, "Expand": {0, anyDevice, "strided copy"},
	"Slice": {0, anyDevice, "strided copy"}, "Concat": {0, anyDevice, "strided copies"},
	"Split": {0, anyDevice, "strided copies"}, "Tile": {0, anyDevice, "strided copy"},
	"Gather":  {0, anyDevice, "gather kernel"},
	"Pad":     {0, anyDevice, "fill + strided copy (constant mode)"},
	"Reshape": {0, anyDevice, "metadata only"}, "Squeeze": {0, anyDevice, "metadata only"},
	"Unsqueeze": {0, anyDevice, "metadata only"}, "Flatten": {0, anyDevice, "metadata only"},
	"Identity": {0, anyDevice, "metadata only"}, "Dropout": {0, f32Only, "inference: metadata only"},
	"Trilu":    {0, anyDevice, "elementwise (usually folded: causal masks)"},
	"Shape":    {0, nil, "folded on the host at plan time"},
	"Constant": {0, nil, "folded on the host"}, "ConstantOfShape": {0, nil, "fill kernel (usually folded)"},
	ops.DomainAttnrun + ":" + ops.FusedAttentionOp: {0, f32Only, "fused attention kernel (online softmax)"},
	"Attention":        {0, f32Only, "the fused attention kernel (+ Concat for the KV cache); float32, head sizes up to 128"},
	"RMSNormalization": {0, f32Only, "one block per row"},
	"RotaryEmbedding":  {0, f32Only, "one thread per element"},
}

// gpuFromOpset is the first opset whose semantics the gpu lowering of an op
// implements, for ops whose earlier versions differ in more than types
// (attribute-driven broadcasting before 7; Concat-1's default axis; Split-1's
// float sizes input; Tile-1's tiles and axis inputs; Dropout-1/6's random
// mode): earlier versions run on the cpu backend.
var gpuFromOpset = map[string]int64{
	"Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Pow": 7, "And": 7, "Or": 7, "Xor": 7,
	"Equal": 7, "Greater": 7, "Less": 7, "Gemm": 7, "Dropout": 7,
	"Concat": 4, "Split": 2, "Tile": 6, "Reshape": 5, "Pad": 11,
}

// ruleKey is the rules key of an op.
func ruleKey(domain, opType string) string {
	if domain == "" || domain == "ai.onnx" {
		return opType
	}
	return domain + ":" + opType
}

// verdict decides whether the GPU backend takes a node.
func verdict(q plugins.NodeQuery) plugins.Verdict {
	key := ruleKey(q.Domain, q.OpType)
	r, ok := rules[key]
	if !ok {
		return plugins.Verdict{Reason: fmt.Sprintf("the gpu backend has no kernel for %s", key)}
	}
	if _, err := ops.Lookup(q.Domain, q.OpType, int(q.Opset)); err != nil {
		return plugins.Verdict{Reason: err.Error()}
	}
	if from, ok := gpuFromOpset[key]; ok && q.Opset < from {
		return plugins.Verdict{Reason: fmt.Sprintf("%s before opset %d is not supported on the gpu backend (its kernels implement %s-%d on)", key, from, key, from)}
	}
	if q.OpType == "Gather" && len(q.InputDTypes) > 1 {
		if dt := q.InputDTypes[1]; dt != ir.Undefined && dt != ir.Int64 && dt != ir.Int32 {
			return plugins.Verdict{Reason: fmt.Sprintf("Gather indices of type %v are not supported on the gpu backend", dt)}
		}
	}
	if want, ok := inputTypes[q.OpType]; ok {
		if reason := inputsVerdict(q.OpType, q.InputDTypes, want); reason != "" {
			return plugins.Verdict{Reason: reason}
		}
	}
	if r.dtypes == nil || r.typeInput >= len(q.InputDTypes) {
		return plugins.Verdict{Accepted: true}
	}
	dt := q.InputDTypes[r.typeInput]
	if dt == ir.Undefined {
		return plugins.Verdict{Accepted: true}
	}
	for _, d := range r.dtypes {
		if d == dt {
			return plugins.Verdict{Accepted: true}
		}
	}
	return plugins.Verdict{Reason: fmt.Sprintf("%s on %v (input %d) is not supported on the gpu backend (it takes %s)", key, dt, r.typeInput, typeList(r.dtypes))}
}

func typeList(ds []ir.DType) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ", ")
}

// supportedOps lists the op table for Info, from the ops registry's opset
// ranges.
func supportedOps() []plugins.OpSupport {
	var out []plugins.OpSupport
	for _, sc := range ops.Schemas() {
		r, ok := rules[sc.Key()]
		if !ok {
			continue
		}
		out = append(out, plugins.OpSupport{Domain: sc.Domain, OpType: sc.OpType, Since: sc.Since, Until: sc.Until, DTypes: append([]ir.DType(nil), r.dtypes...)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].OpType != out[j].OpType {
			return out[i].OpType < out[j].OpType
		}
		return out[i].Since < out[j].Since
	})
	return out
}

// inputTypes lists, for ops whose every input is checked, the element
// types each input may have on the device (the last entry covers the
// rest): the kernels are float32 (there is no float16 on the device),
// masks bool or float32, indices int64.
var inputTypes = map[string][][]ir.DType{
	"Attention":        {f32Only, f32Only, f32Only, {ir.Bool, ir.Float}, f32Only, f32Only, {ir.Int64}},
	"RMSNormalization": {f32Only, f32Only},
	"RotaryEmbedding":  {f32Only, f32Only, f32Only, {ir.Int64}},
}

// inputsVerdict checks a node's input types against want; it returns the
// reason for refusing, or "".
func inputsVerdict(op string, dts []ir.DType, want [][]ir.DType) string {
	for i, dt := range dts {
		if dt == ir.Undefined {
			continue
		}
		w := want[min(i, len(want)-1)]
		ok := false
		for _, d := range w {
			ok = ok || dt == d
		}
		if !ok {
			return fmt.Sprintf("%s input %d of type %v is not supported on the gpu backend (it takes %s)", op, i, dt, typeList(w))
		}
	}
	return ""
}
