package onnx

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// modelPaths returns every exported reference model; it fails the test when
// there are none, so that a missing models/ directory cannot pass silently.
func modelPaths(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "models", "*", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no models found under ../models/*/model.onnx")
	}
	sort.Strings(paths)
	return paths
}

func modelName(path string) string { return filepath.Base(filepath.Dir(path)) }

// roundTrip checks Decode(Encode(m)) == m and that encoding is deterministic.
func roundTrip(t *testing.T, m *ir.Model) {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	m2, err := Decode(b, Options{})
	if err != nil {
		t.Fatalf("Decode(Encode(m)): %v", err)
	}
	if !reflect.DeepEqual(m, m2) {
		diffModels(t, m, m2)
		t.Fatal("Decode(Encode(m)) differs from m")
	}
	b2, err := Encode(m2)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Error("Encode is not deterministic")
	}
}

// diffModels reports where two models differ, to make a round-trip failure
// readable.
func diffModels(t *testing.T, a, b *ir.Model) {
	t.Helper()
	ga, gb := a.Graph, b.Graph
	if !reflect.DeepEqual(a.Opsets, b.Opsets) || a.IRVersion != b.IRVersion || !reflect.DeepEqual(a.Metadata, b.Metadata) {
		t.Errorf("model header: %+v vs %+v", *a, *b)
	}
	for i := range ga.Nodes {
		if i >= len(gb.Nodes) || !reflect.DeepEqual(ga.Nodes[i], gb.Nodes[i]) {
			t.Errorf("node %d differs: %+v", i, ga.Nodes[i])
			if i < len(gb.Nodes) && len(ga.Nodes[i].Attrs) == len(gb.Nodes[i].Attrs) {
				for j, a := range ga.Nodes[i].Attrs {
					if b := gb.Nodes[i].Attrs[j]; !reflect.DeepEqual(a, b) {
						t.Errorf("attribute %q: %#v\nvs %#v", a.Name, a, b)
					}
				}
			}
			return
		}
	}
	for _, name := range ga.InitializerOrder {
		if !reflect.DeepEqual(ga.Initializers[name], gb.Initializers[name]) {
			t.Errorf("initializer %q differs", name)
		}
	}
	if !reflect.DeepEqual(ga.Inputs, gb.Inputs) || !reflect.DeepEqual(ga.Outputs, gb.Outputs) {
		t.Errorf("inputs/outputs differ")
	}
}

func TestReferenceModels(t *testing.T) {
	for _, path := range modelPaths(t) {
		t.Run(modelName(path), func(t *testing.T) {
			m, err := Load(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// Facts every export shares (models/README.md): PyTorch's at
			// opset 17, or at the older opset N a name ending in _opsetN
			// gives (IR 6 at opset 11), or models/export_opset23.py's graphs
			// on PyTorch weights at opset 23 (IR 11).
			opset, producer, minIR := int64(17), "pytorch", int64(7)
			if m.ProducerName == "attnrun models/export_opset23.py" {
				opset, producer, minIR = 23, m.ProducerName, 11
			} else if _, v, ok := strings.Cut(modelName(path), "_opset"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("model name suffix _opset%s: %v", v, err)
				}
				opset = n
				if n <= 11 {
					minIR = 6
				}
			}
			if v, ok := m.OpsetFor(""); !ok || v != opset {
				t.Errorf("default opset = %d, %v; want %d", v, ok, opset)
			}
			if m.ProducerName != producer || m.IRVersion < minIR {
				t.Errorf("producer %q, ir_version %d", m.ProducerName, m.IRVersion)
			}
			g := m.Graph
			if len(g.Nodes) == 0 || len(g.Inputs) == 0 || len(g.Outputs) == 0 || g.Outputs[0].Name != "y" {
				t.Fatalf("graph: %d nodes, %d inputs, outputs %v", len(g.Nodes), len(g.Inputs), g.Outputs)
			}
			if len(g.InitializerOrder) != len(g.Initializers) {
				t.Errorf("InitializerOrder has %d names, Initializers %d", len(g.InitializerOrder), len(g.Initializers))
			}
			for _, in := range g.Inputs {
				if _, isInit := g.Initializers[in.Name]; isInit {
					t.Errorf("input %q is an initializer", in.Name)
				}
				if !in.Type.RankKnown || len(in.Type.Shape) == 0 {
					t.Errorf("input %q has no declared shape", in.Name)
					continue
				}
				// Every export has a dynamic axis (batch or seq), the first
				// but for a tensor shared by the batch (ESPnet's pos_emb
				// [1, seq, C]), except a head_mask, one value a head.
				if !slices.ContainsFunc(in.Type.Shape, func(d ir.Dim) bool { return d.Param != "" }) && in.Name != "head_mask" {
					t.Errorf("input %q: no dim of %v is symbolic", in.Name, in.Type.Shape)
				}
			}
			for name, init := range g.Initializers {
				if err := init.Check(); err != nil {
					t.Errorf("initializer %q: %v", name, err)
				}
			}
			// The structure is valid for every export.
			if err := g.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			roundTrip(t, m)
		})
	}
}

// TestCausalMaskBool checks the one bool raw_data initializer (the tensor
// onnx-go fails on): causal_mask[0,0,i,j] is True (masked) exactly when j > i.
func TestCausalMaskBool(t *testing.T) {
	for _, name := range []string{"s000_causal", "s000_causal_or"} {
		path := filepath.Join("..", "models", name, "model.onnx")
		m, err := Load(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mask := m.Graph.Initializers["causal_mask"]
		if mask == nil || mask.DType != ir.Bool || !reflect.DeepEqual(mask.Shape, []int{1, 1, 64, 64}) {
			t.Fatalf("%s: causal_mask = %v", name, mask)
		}
		b := mask.Bools()
		for i := 0; i < 64; i++ {
			for j := 0; j < 64; j++ {
				if b[i*64+j] != (j > i) {
					t.Fatalf("%s: causal_mask[%d,%d] = %v", name, i, j, b[i*64+j])
				}
			}
		}
	}
}

func TestReferenceDataSets(t *testing.T) {
	total := 0
	for _, path := range modelPaths(t) {
		dir := filepath.Dir(path)
		sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
		if len(sets) == 0 {
			t.Errorf("%s: no test_data_set_*", dir)
			continue
		}
		m, err := Load(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range sets {
			pbs, _ := filepath.Glob(filepath.Join(set, "*.pb"))
			nIn := 0
			for _, pb := range pbs {
				total++
				data, err := os.ReadFile(pb)
				if err != nil {
					t.Fatal(err)
				}
				name, tensor, err := DecodeTensor(data)
				if err != nil {
					t.Errorf("%s: %v", pb, err)
					continue
				}
				if err := tensor.Check(); err != nil {
					t.Errorf("%s: %v", pb, err)
				}
				// input_K.pb is named after graph input K, output_K after output K.
				var decl *ir.ValueInfo
				base := filepath.Base(pb)
				var k int
				switch {
				case strings.HasPrefix(base, "input_"):
					nIn++
					if _, err := fmt.Sscanf(base, "input_%d.pb", &k); err == nil && k < len(m.Graph.Inputs) {
						decl = m.Graph.Inputs[k]
					}
				case strings.HasPrefix(base, "output_"):
					if _, err := fmt.Sscanf(base, "output_%d.pb", &k); err == nil && k < len(m.Graph.Outputs) {
						decl = m.Graph.Outputs[k]
					}
				}
				if decl == nil {
					t.Errorf("%s: does not match a graph input or output", pb)
					continue
				}
				if name != decl.Name || tensor.DType != decl.Type.DType || len(tensor.Shape) != len(decl.Type.Shape) {
					t.Errorf("%s: %q %v%v, declared %q %v", pb, name, tensor.DType, tensor.Shape, decl.Name, decl.Type)
				}
				for i, d := range decl.Type.Shape {
					if d.Known() && i < len(tensor.Shape) && int64(tensor.Shape[i]) != d.Value {
						t.Errorf("%s: shape %v, declared %v", pb, tensor.Shape, decl.Type.Shape)
					}
				}
				// EncodeTensor/DecodeTensor round trip.
				b, err := EncodeTensor(name, tensor)
				if err != nil {
					t.Fatal(err)
				}
				name2, t2, err := DecodeTensor(b)
				if err != nil || name2 != name || !reflect.DeepEqual(t2, tensor) {
					t.Errorf("%s: tensor round trip: %q %v %v", pb, name2, t2, err)
				}
			}
			if nIn != len(m.Graph.Inputs) {
				t.Errorf("%s: %d input files for %d graph inputs", set, nIn, len(m.Graph.Inputs))
			}
		}
	}
	if total == 0 {
		t.Fatal("no test data .pb files found")
	}
}
