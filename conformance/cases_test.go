package conformance

import (
	"strings"
	"testing"
)

func TestCasePrefixes(t *testing.T) {
	tests := []struct {
		op   string
		want string
	}{
		{"Add", "add"},
		{"LayerNormalization", "layer_normalization"},
		{"ReduceMean", "reduce_mean"},
		{"ReduceSumSquare", "reduce_sum_square"},
		{"ReduceL2", "reduce_l2"},
		{"ConstantOfShape", "constantofshape"},
		{"LogSoftmax", "logsoftmax"},
		{"CastLike", "castlike"},
		{"GreaterOrEqual", "greater_equal"},
		{"LessOrEqual", "less_equal"},
		{"MatMul", "matmul"},
		{"Trilu", "tril triu"},
		{"Dropout", "dropout training_dropout"},
	}
	for _, tc := range tests {
		if got := strings.Join(CasePrefixes(tc.op), " "); got != tc.want {
			t.Errorf("CasePrefixes(%s) = %q, want %q", tc.op, got, tc.want)
		}
	}
}

func TestAssign(t *testing.T) {
	claimed := []string{"Add", "And", "Cast", "CastLike", "Constant", "ConstantOfShape", "Dropout", "Exp", "Expand",
		"Gather", "Less", "LessOrEqual", "Log", "LogSoftmax", "Max", "ReduceSum", "ReduceSumSquare", "Softmax", "Trilu"}
	tests := []struct {
		name string
		want string // "" for not a case of a claimed op
	}{
		{"test_add", "Add"},
		{"test_add_bcast", "Add"},
		{"test_and2d", "And"},
		{"test_and_bcast3v1d", "And"},
		{"test_cast_FLOAT_to_DOUBLE", "Cast"},
		{"test_castlike_FLOAT_to_DOUBLE_expanded", "CastLike"},
		{"test_constant", "Constant"},
		{"test_constant_pad", ""}, // Pad
		{"test_constantofshape_int_zeros", "ConstantOfShape"},
		{"test_dropout_default", "Dropout"},
		{"test_training_dropout_mask", "Dropout"},
		{"test_exp_example", "Exp"},
		{"test_expand_dim_changed", "Expand"},
		{"test_gather_0", "Gather"},
		{"test_gather_elements_0", ""}, // GatherElements
		{"test_gathernd_example_int32", ""},
		{"test_less_bcast", "Less"},
		{"test_less_equal_bcast_expanded", "LessOrEqual"},
		{"test_log_example", "Log"},
		{"test_logsoftmax_axis_0_expanded", "LogSoftmax"},
		{"test_max_float16", "Max"},
		{"test_maxpool_2d_default", ""},
		{"test_maxunpool_export_with_output_shape", ""},
		{"test_reduce_sum_keepdims_example", "ReduceSum"},
		{"test_reduce_sum_square_keepdims_example", "ReduceSumSquare"},
		{"test_reduce_log_sum_exp_keepdims_example", ""},
		{"test_softmax_axis_0_expanded", "Softmax"},
		{"test_softmax_cross_entropy_mean", ""}, // SoftmaxCrossEntropyLoss
		{"test_sce_mean", ""},
		{"test_tril_neg", "Trilu"},
		{"test_triu_zero", "Trilu"},
		{"test_hardsigmoid", ""},
		{"not_a_case", ""},
	}
	names := make([]string, len(tests))
	for i, tc := range tests {
		names[i] = tc.name
	}
	got, err := Assign(names, claimed)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		if got[tc.name] != tc.want {
			t.Errorf("%s: op %q, want %q", tc.name, got[tc.name], tc.want)
		}
	}
	if _, err := Assign(names, []string{"Trilu", "Tril"}); err == nil || !strings.Contains(err.Error(), `"tril"`) {
		t.Errorf("two ops with prefix tril: error %v", err)
	}
}

func TestParseExpectations(t *testing.T) {
	good := `# header
pass test_add

exclude test_cast_FLOAT_to_BFLOAT16 -- dtype: bfloat16 is not supported
exclude test_new_op -- opset: needs opset 19
`
	e, err := ParseExpectations(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if !e.Pass["test_add"] || len(e.Pass) != 1 || e.Exclude["test_cast_FLOAT_to_BFLOAT16"] != "dtype: bfloat16 is not supported" ||
		e.Exclude["test_new_op"] != "opset: needs opset 19" || len(e.Exclude) != 2 {
		t.Errorf("parsed %+v", e)
	}
	var b strings.Builder
	if err := e.Format(&b, "h"); err != nil {
		t.Fatal(err)
	}
	want := "# h\npass test_add\nexclude test_cast_FLOAT_to_BFLOAT16 -- dtype: bfloat16 is not supported\nexclude test_new_op -- opset: needs opset 19\n"
	if b.String() != want {
		t.Errorf("Format:\n%s\nwant:\n%s", b.String(), want)
	}
	bad := []struct{ text, wantErr string }{
		{"exclude test_x -- too slow", "must be \"kind: why\""},
		{"exclude test_x -- numerics: off by 1e-3", "kind one of dtype, opset, subgraph"},
		{"exclude test_x", "want \"exclude test_name -- kind: reason\""},
		{"exclude test_x -- dtype:", "must be \"kind: why\""},
		{"pass test_a test_b", "want \"pass test_name\""},
		{"pass test_a\npass test_a", "listed twice"},
		{"pass test_a\nexclude test_a -- dtype: string", "listed twice"},
		{"skip test_a", "want \"pass\" or \"exclude\""},
	}
	for _, tc := range bad {
		_, err := ParseExpectations(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.wantErr)
		}
	}
}

func TestReportCheck(t *testing.T) {
	r := &Report{
		Backend: "cpu",
		Suite:   "onnx-1.12 (Debian)",
		Ops:     []string{"Add", "Cast"},
		Cases: map[string]string{"test_add": "Add", "test_add_bcast": "Add", "test_cast_A": "Cast",
			"test_cast_B": "Cast", "test_cast_C": "Cast", "test_cast_D": "Cast",
			"test_cast_E_expanded": "Cast", "test_cast_F_expanded": "Cast", "test_cast_G": "Cast"},
		Outcomes: map[string]Outcome{
			"test_add":             {Pass: true},
			"test_add_bcast":       {Pass: false, Detail: "max_abs=1"},
			"test_cast_A":          {Pass: false},
			"test_cast_B":          {Pass: true},
			"test_cast_C":          {Pass: false},
			"test_cast_E_expanded": {Pass: false},
			"test_cast_F_expanded": {Pass: false},
			"test_cast_G":          {Pass: false},
		},
	}
	e := &Expectations{
		Pass: map[string]bool{"test_add": true, "test_add_bcast": true, "test_gone": true, "test_mul": true, "test_cast_D": true},
		Exclude: map[string]string{"test_cast_A": "dtype: bfloat16", "test_cast_B": "dtype: string",
			"test_cast_E_expanded": "subgraph: Loop", "test_cast_F_expanded": "subgraph: Loop", "test_cast_G": "subgraph: Loop"},
	}
	subgraphs := map[string]bool{"test_cast_E_expanded": true, "test_cast_F_expanded": false, "test_cast_G": true}
	r.check([]string{"test_add", "test_add_bcast", "test_cast_A", "test_cast_B", "test_cast_C", "test_cast_D",
		"test_cast_E_expanded", "test_cast_F_expanded", "test_cast_G", "test_mul"}, e, subgraphs)
	want := []string{
		"test_add_bcast (Add): expected to pass, FAIL max_abs=1",
		"test_cast_B (Cast): excluded (dtype: string) but passes: list it as pass",
		"test_cast_C (Cast): a case of a claimed op is in neither list (FAIL )",
		"test_cast_D (Cast): attnrun conform printed no result",
		"test_cast_F_expanded (Cast): excluded as subgraph, but only _expanded cases whose model has a Loop/If/Scan body may be",
		"test_cast_G (Cast): excluded as subgraph, but only _expanded cases whose model has a Loop/If/Scan body may be",
		"test_gone: listed as pass but no such case in the suite",
		"test_mul: listed as pass but it is not a case of a claimed op",
	}
	if strings.Join(r.Problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
	if r.Passed != 1 || r.Excluded != 5 {
		t.Errorf("passed %d excluded %d, want 1 and 5", r.Passed, r.Excluded)
	}
	if got := r.Summary(); !strings.HasPrefix(got, "node suite onnx-1.12 (Debian) (cpu): 1 of 9 cases of 2 claimed ops pass, 5 excluded") {
		t.Errorf("summary %q", got)
	}
}
