// Package conformance runs ONNX's backend node test suite (the
// test_*/model.onnx cases shipped by libonnx-testdata) against attnrun's
// backends and checks the results against a committed expectations file,
// conformance/expectations/<backend>.txt. A case "of" an op is one whose name
// starts with that op's case prefix (see CasePrefixes); every case of every
// op a backend claims must be listed, as a pass or as an exclusion with an
// allowed reason, so that nothing is skipped silently.
package conformance

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// prefixOverrides are the ONNX suite's case-name prefixes for ops whose
// names do not follow the plain CamelCase → snake_case rule. ONNX names its
// node tests by hand, and irregularly: test_constantofshape_*, test_logsoftmax_*,
// test_greater_equal* (GreaterOrEqual), test_tril*/test_triu* (Trilu),
// test_training_dropout* (Dropout in training mode)...
var prefixOverrides = map[string][]string{
	"ArgMax":                    {"argmax"},
	"ArgMin":                    {"argmin"},
	"AveragePool":               {"averagepool"},
	"BatchNormalization":        {"batchnorm"},
	"BitShift":                  {"bitshift"},
	"CastLike":                  {"castlike"},
	"ConstantOfShape":           {"constantofshape"},
	"CumSum":                    {"cumsum"},
	"DepthToSpace":              {"depthtospace"},
	"DequantizeLinear":          {"dequantizelinear"},
	"Dropout":                   {"dropout", "training_dropout"},
	"DynamicQuantizeLinear":     {"dynamicquantizelinear"},
	"EyeLike":                   {"eyelike"},
	"GatherND":                  {"gathernd"},
	"GlobalAveragePool":         {"globalaveragepool"},
	"GlobalMaxPool":             {"globalmaxpool"},
	"GreaterOrEqual":            {"greater_equal"},
	"HardSigmoid":               {"hardsigmoid"},
	"HardSwish":                 {"hardswish"},
	"Hardmax":                   {"hardmax"},
	"RMSNormalization":          {"rms_normalization"},
	"InstanceNormalization":     {"instancenorm"},
	"IsInf":                     {"isinf"},
	"IsNaN":                     {"isnan"},
	"LeakyRelu":                 {"leakyrelu"},
	"LessOrEqual":               {"less_equal"},
	"LogSoftmax":                {"logsoftmax"},
	"MatMul":                    {"matmul"},
	"MatMulInteger":             {"matmulinteger"},
	"MaxPool":                   {"maxpool"},
	"MaxUnpool":                 {"maxunpool"},
	"MeanVarianceNormalization": {"mvn"},
	"NegativeLogLikelihoodLoss": {"nllloss"},
	"NonMaxSuppression":         {"nonmaxsuppression"},
	"NonZero":                   {"nonzero"},
	"OneHot":                    {"onehot"},
	"PRelu":                     {"prelu"},
	"QuantizeLinear":            {"quantizelinear"},
	"ReduceL1":                  {"reduce_l1"},
	"ReduceL2":                  {"reduce_l2"},
	"ScatterND":                 {"scatternd"},
	"SoftmaxCrossEntropyLoss":   {"sce", "softmax_cross_entropy"},
	"Softplus":                  {"softplus"},
	"Softsign":                  {"softsign"},
	"SpaceToDepth":              {"spacetodepth"},
	"ThresholdedRelu":           {"thresholdedrelu"},
	"TopK":                      {"top_k"},
	"Trilu":                     {"tril", "triu"},
}

// foreignOps are ONNX ops attnrun does not necessarily claim whose case
// prefixes start with a claimed op's prefix: test_constant_pad is Pad, not
// Constant; test_gather_elements_* is GatherElements, not Gather. They take
// part in longest-prefix matching so that such cases go to their own op.
var foreignOps = []string{
	"GatherElements", "GatherND", "Pad", "ReduceLogSum", "ReduceLogSumExp",
	"ReduceSumSquare", "SoftmaxCrossEntropyLoss", "ScatterElements", "ScatterND",
	"SequenceInsert", "SequenceMap", "MatMulInteger", "MaxPool", "MaxUnpool",
	"SplitToSequence",
}

// extraPrefixes are prefixes of foreign ops not derivable from their names.
var extraPrefixes = map[string][]string{
	"Pad": {"pad", "constant_pad", "edge_pad", "reflect_pad", "wrap_pad"},
}

// CasePrefixes returns the case-name prefixes (without "test_") of op's
// node tests: the snake_case of its name, or the irregular names ONNX uses.
func CasePrefixes(op string) []string {
	if p, ok := prefixOverrides[op]; ok {
		return append(append([]string(nil), p...), extraPrefixes[op]...)
	}
	if p, ok := extraPrefixes[op]; ok {
		return append([]string(nil), p...)
	}
	return []string{snake(op)}
}

// snake turns CamelCase into snake_case: ReduceMean → reduce_mean,
// LayerNormalization → layer_normalization, ReduceL2 → reduce_l2.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// hasPrefix reports whether case name (without "test_") is p or starts with
// p followed by '_' or a digit (test_and2d, test_add_bcast), so that "exp"
// does not take test_expand_* and "max" does not take test_maxpool_*.
func hasPrefix(name, p string) bool {
	if !strings.HasPrefix(name, p) {
		return false
	}
	if len(name) == len(p) {
		return true
	}
	c := name[len(p)]
	return c == '_' || (c >= '0' && c <= '9')
}

// Assign maps each case name (a directory name, "test_...") to the claimed op
// it belongs to: the op with the longest matching prefix among the claimed
// ops and the foreign ops. Cases whose best match is a foreign op, or that
// match nothing, are left out. It fails if two ops claim the same prefix.
func Assign(cases []string, claimed []string) (map[string]string, error) {
	type pfx struct{ p, op string }
	var all []pfx
	owner := map[string]string{}
	isClaimed := map[string]bool{}
	add := func(op string) error {
		for _, p := range CasePrefixes(op) {
			if o, ok := owner[p]; ok && o != op {
				return fmt.Errorf("case prefix %q belongs to both %s and %s", p, o, op)
			}
			if _, ok := owner[p]; !ok {
				owner[p] = op
				all = append(all, pfx{p, op})
			}
		}
		return nil
	}
	for _, op := range claimed {
		isClaimed[op] = true
		if err := add(op); err != nil {
			return nil, err
		}
	}
	for _, op := range foreignOps {
		if !isClaimed[op] {
			if err := add(op); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return len(all[i].p) > len(all[j].p) })
	out := map[string]string{}
	for _, c := range cases {
		name, ok := strings.CutPrefix(c, "test_")
		if !ok {
			continue
		}
		for _, x := range all {
			if hasPrefix(name, x.p) {
				if isClaimed[x.op] {
					out[c] = x.op
				}
				break
			}
		}
	}
	return out, nil
}
