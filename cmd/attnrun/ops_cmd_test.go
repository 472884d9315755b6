package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/backends/cpu"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
	"github.com/attnrun/attnrun/plugins"
)

// TestOpsTableMatchesDocs regenerates the `attnrun ops --markdown` table
// for the built-in cpu backend (its Info, as the backend process reports
// it) and fails when docs/ops.md differs: run `make ops-table`.
func TestOpsTableMatchesDocs(t *testing.T) {
	srv, err := cpu.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	info, err := srv.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := writeOpsMarkdown(&got, opsRows(ops.Schemas(), []opsBackend{{info.Name, info.Ops}})); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/ops.md")
	if err != nil {
		t.Fatalf("%v (run make ops-table)", err)
	}
	if got.String() != string(want) {
		g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < max(len(g), len(w)); i++ {
			var gl, wl string
			if i < len(g) {
				gl = g[i]
			}
			if i < len(w) {
				wl = w[i]
			}
			if gl != wl {
				t.Fatalf("docs/ops.md is stale (run make ops-table); first difference at line %d:\n got: %s\nfile: %s", i+1, gl, wl)
			}
		}
	}
	// Every registered op is a row, and the cpu backend takes every one.
	for _, s := range ops.Schemas() {
		if !strings.Contains(got.String(), "| "+s.Key()+" | ") {
			t.Errorf("op %s is missing from the table", s.Key())
		}
	}
	if strings.Contains(got.String(), "| none |") {
		t.Error("the cpu backend should take every registered op")
	}
}

func TestDescribeDTypes(t *testing.T) {
	tests := []struct {
		in   []ir.DType
		want string
	}{
		{ops.FloatTypes, "float"},
		{ops.AllTypes, "float, int, uint, bool, string"},
		{[]ir.DType{ir.Float, ir.Double, ir.Float16, ir.Int32, ir.Int64, ir.Uint32, ir.Uint64, ir.Bool}, "float, int32, int64, uint32, uint64, bool"},
		{[]ir.DType{ir.Bool}, "bool"},
		{[]ir.DType{ir.Float, ir.Int64}, "float32, int64"},
		{[]ir.DType{ir.Float8E4M3FN, ir.Float8E4M3FNUZ, ir.Float8E5M2, ir.Float8E5M2FNUZ, ir.Int4, ir.Uint4, ir.Float8E8M0}, "float8, int4, float8e8m0"},
	}
	for _, tc := range tests {
		if got := describeDTypes(tc.in); got != tc.want {
			t.Errorf("describeDTypes(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOpsRows(t *testing.T) {
	infer := func(*ir.Node, int, []ops.Value) ([]ops.Value, error) { return nil, nil }
	run := func(*ops.Context, *ir.Node, []*ir.Tensor) ([]*ir.Tensor, error) { return nil, nil }
	schemas := []*ops.Schema{
		{OpType: "Add", Since: 7, Until: 13, TypeInput: 0, DTypes: ops.FloatTypes, Infer: infer, Run: run, Doc: "add"},
		{OpType: "Add", Since: 14, Until: 18, TypeInput: 0, DTypes: ops.NumericTypes, Infer: infer, Run: run, Doc: "add v14"},
		{OpType: "Add", Since: 19, Until: 20, TypeInput: 0, DTypes: ops.NumericTypes, Infer: infer, Run: run, Doc: "add v19"},
		{OpType: "Constant", Since: 1, Until: 18, TypeInput: -1, Infer: infer, Run: run},
		{Domain: ops.DomainAttnrun, OpType: "FusedAttention", Since: 1, Until: 1, TypeInput: 0, DTypes: []ir.DType{ir.Float}, Infer: infer, Run: run},
	}
	backends := []opsBackend{
		{"cpu", []plugins.OpSupport{{OpType: "Add", Since: 7, Until: 13}, {OpType: "Add", Since: 14, Until: 18}, {OpType: "Add", Since: 19, Until: 20},
			{OpType: "Constant", Since: 1, Until: 18}, {Domain: ops.DomainAttnrun, OpType: "FusedAttention", Since: 1, Until: 1}}},
		{"gpu", []plugins.OpSupport{{Domain: "ai.onnx", OpType: "Add", Since: 14, Until: 18}, {OpType: "Constant", Since: 1, Until: 12}}},
	}
	rows := opsRows(schemas, backends)
	type row struct{ key, opsets, types, backends, doc string }
	want := []row{
		{"Add", "7-13, 14-18, 19-20", "7-13: float; 14-18, 19-20: + int, uint", "cpu, gpu (14-18)", "add v19"},
		{"Constant", "1-18", "any", "cpu", ""},
		{"com.attnrun:FusedAttention", "1", "float32", "cpu", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		got := row{r.key, r.opsets(), r.types(), r.backendList(), r.doc()}
		if got != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, got, want[i])
		}
	}
	var text bytes.Buffer
	if err := writeOpsText(&text, rows[:1]); err != nil {
		t.Fatal(err)
	}
	wantText := "Add\n  opsets:   7-13, 14-18, 19-20\n  types:    7-13: float; 14-18, 19-20: + int, uint\n  backends: cpu, gpu (14-18)\n  add v19\n1 ops\n"
	if text.String() != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", text.String(), wantText)
	}
}
