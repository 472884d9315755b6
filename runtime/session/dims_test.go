package session

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gorgonia.org/tensor"
)

// TestSharedDimParam runs models/s001_cross_attention_shared_dim, a real
// PyTorch export whose decoder (x) and encoder (enc, enc_mask) lengths are
// both the dim_param "S", on its three data sets (each with S at two
// sizes): every run matches PyTorch, the session logs one warning for S in
// all, and with StrictDims every run is refused in the host.
func TestSharedDimParam(t *testing.T) {
	dir := "../../models/s001_cross_attention_shared_dim"
	var mu sync.Mutex
	var logged []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	s, err := Open(context.Background(), filepath.Join(dir, "model.onnx"), Options{Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	strict, err := Open(context.Background(), filepath.Join(dir, "model.onnx"), Options{StrictDims: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	for set := 0; set < 3; set++ {
		ds := filepath.Join(dir, fmt.Sprintf("test_data_set_%d", set))
		in := readInputs(t, ds)
		out, err := s.Run(context.Background(), in)
		if err != nil {
			t.Fatalf("set %d: %v", set, err)
		}
		_, want := readPB(t, filepath.Join(ds, "output_0.pb"))
		checkClose(t, fmt.Sprintf("set %d y", set), out["y"], want.Shape(), want.Data().([]float32), 1e-5)
		_, err = strict.Run(context.Background(), in)
		if err == nil || !strings.Contains(err.Error(), `input "enc" dim 1 (S) is `) || !strings.HasSuffix(err.Error(), "(refused: strict dims)") {
			t.Errorf("set %d, StrictDims: err = %v", set, err)
		}
	}
	var warnings []string
	for _, l := range logged {
		if strings.HasPrefix(l, "warning: ") {
			warnings = append(warnings, l)
		}
	}
	const want = `warning: inputs give dim_param "S" different sizes: "x" dim 1 = 5, "enc" dim 1 = 9, "enc_mask" dim 1 = 9; running with each input's own size, as ONNX Runtime does (Options.StrictDims refuses)`
	if len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q\nwant one: %s", warnings, want)
	}
	st, err := strict.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st["cpu"].Runs != 0 {
		t.Errorf("StrictDims: the backend served %d runs, want 0", st["cpu"].Runs)
	}
}

// readInputs reads a data set's input_K.pb files, by their stored names.
func readInputs(t *testing.T, dataSet string) map[string]*tensor.Dense {
	t.Helper()
	in := map[string]*tensor.Dense{}
	for _, f := range mustGlob(t, filepath.Join(dataSet, "input_*.pb")) {
		name, d := readPB(t, f)
		in[name] = d
	}
	return in
}
