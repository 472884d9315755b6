package onnx

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode checks that no input makes Decode panic, and that whatever
// decodes also encodes and decodes again. Seeds: the malformed corpus and
// one reference model. Run with `go test -fuzz FuzzDecode ./onnx/`.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "malformed", "*.onnx"))
	seeds = append(seeds, filepath.Join("..", "models", "s002_self_attention_v2", "model.onnx"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, Options{MaxTensorBytes: 1 << 20})
		if err != nil {
			return
		}
		_ = m.Graph.Validate() // must not panic either
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("decoded model does not encode: %v", err)
		}
		if _, err := Decode(b, Options{MaxTensorBytes: 1 << 20}); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// FuzzDecodeTensor does the same for single serialized tensors.
func FuzzDecodeTensor(f *testing.F) {
	pbs, _ := filepath.Glob(filepath.Join("..", "models", "s000_causal", "test_data_set_0", "*.pb"))
	if len(pbs) == 0 {
		f.Fatal("no seed tensors under ../models/s000_causal/test_data_set_0")
	}
	for _, s := range pbs {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		name, tensor, err := DecodeTensor(data)
		if err != nil {
			return
		}
		if err := tensor.Check(); err != nil {
			t.Fatalf("decoded tensor is inconsistent: %v", err)
		}
		if _, err := EncodeTensor(name, tensor); err != nil {
			t.Fatalf("decoded tensor does not encode: %v", err)
		}
	})
}
