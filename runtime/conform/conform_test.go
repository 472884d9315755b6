package conform

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

func TestCompare(t *testing.T) {
	tol := Tolerance{Rtol: 1e-4, Atol: 1e-5}
	f := func(shape []int, v ...float32) *ir.Tensor { return ir.FromSlice(shape, v) }
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name      string
		got, want *ir.Tensor
		wantErr   string
		maxAbs    float64
	}{
		{"equal", f([]int{2}, 1, 2), f([]int{2}, 1, 2), "", 0},
		{"within atol", f([]int{1}, 5e-6), f([]int{1}, 0), "", 5e-6},
		{"within rtol", f([]int{1}, 1000.05), f([]int{1}, 1000), "", 0.04998779296875}, // float32(1000.05) - 1000
		{"beyond", f([]int{1}, 1.01), f([]int{1}, 1), "element 0 is 1.01", 0.01},
		{"nan matches nan", f([]int{2}, nan, 1), f([]int{2}, nan, 1), "", 0},
		{"nan vs number", f([]int{1}, nan), f([]int{1}, 1), "element 0", 0},
		{"inf sign", f([]int{1}, inf), f([]int{1}, -inf), "element 0", 0},
		{"shape", f([]int{2, 1}, 1, 2), f([]int{1, 2}, 1, 2), "shape [2x1], want [1x2]", 0},
		{"dtype", ir.FromSlice([]int{1}, []int64{1}), f([]int{1}, 1), "dtype int64, want float32", 0},
		{"int exact", ir.FromSlice([]int{2}, []int64{1 << 60, 2}), ir.FromSlice([]int{2}, []int64{1<<60 + 1, 2}), "element 0 is", 1},
		{"bool", ir.FromSlice([]int{2}, []bool{true, false}), ir.FromSlice([]int{2}, []bool{true, true}), "element 1 is 0, want 1", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, _, err := Compare(c.got, c.want, tol)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if math.Abs(a-c.maxAbs) > 1e-4*math.Max(1e-3, c.maxAbs) {
				t.Fatalf("maxAbs = %g, want %g", a, c.maxAbs)
			}
		})
	}
}

// TestCaseTolerance checks reading a case's bf16_tolerance.json: the
// tolerance a bf16 run is held to, and the files refused.
func TestCaseTolerance(t *testing.T) {
	cases := []struct {
		name, file string // file "" writes none
		want       Tolerance
		err        string
	}{
		{"none: BF16Tolerance", "", BF16Tolerance, ""},
		{"its own", `{"rtol": 0.1, "atol": 0.2, "why": "cosine attention", "torch_bf16_autocast_max_abs": 0.03}`, Tolerance{Rtol: 0.1, Atol: 0.2}, ""},
		{"no reason", `{"rtol": 0.1, "atol": 0.2}`, Tolerance{}, "why must say why"},
		{"negative", `{"rtol": -1, "atol": 0.2, "why": "x"}`, Tolerance{}, "must be ≥ 0"},
		{"unknown field", `{"rtol": 0.1, "atol": 0.2, "why": "x", "rtoll": 1}`, Tolerance{}, "unknown field"},
		{"not JSON", `rtol = 0.1`, Tolerance{}, "invalid character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "model.onnx"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "bf16_tolerance.json"), []byte(c.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			found, err := Find([]string{dir})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := found[0].BF16For(); got != c.want {
				t.Errorf("tolerance %+v, want %+v", got, c.want)
			}
		})
	}
}
