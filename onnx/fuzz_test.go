package onnx

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// FuzzDecode checks that no input makes Decode panic, and that whatever
// decodes also encodes and decodes again. Seeds: the malformed corpus and
// one reference model. Run with `go test -fuzz FuzzDecode ./onnx/`.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "malformed", "*.onnx"))
	seeds = append(seeds, filepath.Join("..", "models", "s002_self_attention_v2", "model.onnx"))
	addFileSeeds(f, seeds)
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
	addFileSeeds(f, pbs)
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

// FuzzReferenceEmbedded checks the embedded-weights rewrite (embedded.go)
// on any bytes, with a 4-byte threshold so that small inputs reach it: it
// must not panic, and what it rewrites from a valid ModelProto must parse
// as one whose
// every external reference it made lies inside the input, at raw_data the
// size its tensor needs. Seeds: the bundled models.
func FuzzReferenceEmbedded(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "models", "s00[0-2]*", "model.onnx"))
	addFileSeeds(f, seeds)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, n := referenceEmbedded(data, "m.onnx", ir.FileIdentity{}, 4)
		if n == 0 {
			return
		}
		var m onnxpb.ModelProto
		if err := proto.Unmarshal(out, &m); err != nil {
			if proto.Unmarshal(data, &onnxpb.ModelProto{}) == nil {
				t.Fatalf("rewrote %d tensors of a valid model into bytes that do not parse: %v", n, err)
			}
			return // invalid before the rewrite: Decode reports it
		}
		refs := 0
		for _, tp := range m.GetGraph().GetInitializer() {
			var off, length int64 = -1, -1
			for _, kv := range tp.GetExternalData() {
				switch kv.GetKey() {
				case "offset":
					off, _ = strconv.ParseInt(kv.GetValue(), 10, 64)
				case "length":
					length, _ = strconv.ParseInt(kv.GetValue(), 10, 64)
				}
			}
			if off < 0 && length < 0 {
				continue
			}
			refs++
			if off < 0 || length < 4 || off+length > int64(len(data)) {
				t.Fatalf("tensor %q refers to [%d, +%d) of %d bytes", tp.GetName(), off, length, len(data))
			}
		}
		if refs < n {
			t.Fatalf("rewrote %d tensors, found %d references", n, refs)
		}
	})
}

// addFileSeeds adds the bytes of each file as a seed.
func addFileSeeds(f *testing.F, paths []string) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}
