package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/attnrun/attnrun/internal/regfile"
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/onnx"
	"github.com/attnrun/attnrun/onnx/onnxpb"
)

// inputSpec is one --input NAME=SOURCE flag.
type inputSpec struct {
	name, source string
}

func parseInputSpecs(flags []string) ([]inputSpec, error) {
	var specs []inputSpec
	seen := map[string]bool{}
	for _, f := range flags {
		name, src, ok := strings.Cut(f, "=")
		if !ok || name == "" || src == "" {
			return nil, usageErrorf("--input %q: want NAME=file.npy, NAME=file.pb, NAME=random[:1x512x768] or NAME=ones[:1x512]", f)
		}
		if seen[name] {
			return nil, usageErrorf("--input %q is given twice", name)
		}
		seen[name] = true
		specs = append(specs, inputSpec{name, src})
	}
	return specs, nil
}

// parseDims parses --dim NAME=SIZE flags binding symbolic dims.
func parseDims(flags []string) (map[string]int, error) {
	dims := map[string]int{}
	for _, f := range flags {
		name, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, usageErrorf("--dim %q: want NAME=SIZE with SIZE ≥ 0", f)
		}
		dims[name] = n
	}
	return dims, nil
}

// checkDimNames makes a --dim naming no dim_param of the model's inputs a
// usage error (a typo would otherwise be ignored).
func checkDimNames(dims map[string]int, declared []*ir.ValueInfo) error {
	known := map[string]bool{}
	var params []string
	for _, vi := range declared {
		for _, d := range vi.Type.Shape {
			if d.Param != "" && !known[d.Param] {
				known[d.Param] = true
				params = append(params, d.Param)
			}
		}
	}
	var unknown []string
	for name := range dims {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	has := "it has none"
	if len(params) > 0 {
		has = "its dim_params: " + strings.Join(params, ", ")
	}
	return usageErrorf("--dim %s: the model has no dim_param %q (%s)", unknown[0], unknown[0], has)
}

// inputLoader turns input specs into tensors for a model's declared inputs.
type inputLoader struct {
	declared []*ir.ValueInfo
	dims     map[string]int
	maxBytes int64
	seed     uint64
}

// load reads every spec. A spec naming an input the model lacks, and an
// input the model declares that no spec gives, are usage errors, found
// before any file is read.
func (l *inputLoader) load(specs []inputSpec) (map[string]*ir.Tensor, error) {
	byName := make(map[string]*ir.ValueInfo, len(l.declared))
	names := make([]string, len(l.declared))
	for i, d := range l.declared {
		byName[d.Name] = d
		names[i] = d.Name
	}
	given := make(map[string]bool, len(specs))
	for _, s := range specs {
		if byName[s.name] == nil {
			return nil, usageErrorf("unexpected input %q: the model's inputs are %s", s.name, strings.Join(names, ", "))
		}
		given[s.name] = true
	}
	for _, d := range l.declared {
		if !given[d.Name] {
			return nil, usageErrorf("missing input %q (%v): give it with --input %s=FILE or %s=random", d.Name, d.Type, d.Name, d.Name)
		}
	}
	// Inputs whose shape is given (files, random:DIMS, ones:DIMS) first:
	// their shapes bind the symbolic dims a bare random or ones takes, so
	// that x=random:2x128x32 mask=random needs no --dim.
	out := make(map[string]*ir.Tensor, len(specs))
	for _, pass := range []bool{true, false} {
		for i, s := range specs {
			vi := byName[s.name]
			if bare := s.source == "random" || s.source == "ones"; bare == pass {
				continue
			}
			t, err := l.loadOne(s, vi, l.seed+uint64(i))
			if err != nil {
				return nil, fmt.Errorf("input %q: %w", s.name, err)
			}
			out[s.name] = t
			l.bindDims(vi, t.Shape)
		}
	}
	return out, nil
}

// bindDims learns the symbolic dims of vi's declared shape from shape, a
// given input's, where --dim or an earlier input has not bound them.
// Nothing is checked here: the session checks the inputs' shapes.
func (l *inputLoader) bindDims(vi *ir.ValueInfo, shape []int) {
	if !vi.Type.RankKnown || len(vi.Type.Shape) != len(shape) {
		return
	}
	for i, d := range vi.Type.Shape {
		if d.Param == "" {
			continue
		}
		if l.dims == nil {
			l.dims = map[string]int{}
		}
		if _, ok := l.dims[d.Param]; !ok {
			l.dims[d.Param] = shape[i]
		}
	}
}

func (l *inputLoader) loadOne(s inputSpec, vi *ir.ValueInfo, seed uint64) (*ir.Tensor, error) {
	for _, kind := range []string{"random", "ones"} {
		if s.source != kind && !strings.HasPrefix(s.source, kind+":") {
			continue
		}
		shape, err := l.randomShape(strings.TrimPrefix(strings.TrimPrefix(s.source, kind), ":"), vi)
		if err != nil {
			return nil, err
		}
		n := ir.NumElements(shape)
		if n < 0 || (vi.Type.DType.Size() > 0 && n > l.maxBytes/int64(vi.Type.DType.Size())) {
			return nil, fmt.Errorf("%s shape %s is larger than the tensor size limit of %d bytes (--max-tensor-bytes)", kind, ir.ShapeString(shape), l.maxBytes)
		}
		if kind == "ones" {
			return ir.OnesTensor(vi.Type.DType, shape)
		}
		return ir.RandomTensor(vi.Type.DType, shape, seed)
	}
	path := s.source
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if st.Size() > l.maxBytes+1<<20 {
		return nil, fmt.Errorf("%s is %d bytes, above the tensor size limit of %d bytes (--max-tensor-bytes)", path, st.Size(), l.maxBytes)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npy":
		return npy.ReadFile(path)
	case ".pb":
		return l.readTensorProto(path)
	}
	return nil, usageErrorf("%s: unknown input format (want .npy, .pb, random[:DIMS] or ones[:DIMS])", path)
}

// readTensorProto reads a serialized ONNX TensorProto (the input_K.pb files
// of ONNX test cases), with the tensor size limit, resolving external data
// next to the file.
func (l *inputLoader) readTensorProto(path string) (*ir.Tensor, error) {
	data, err := regfile.ReadFile(path, l.maxBytes+1<<20)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: not a serialized ONNX tensor: empty file", path)
	}
	var tp onnxpb.TensorProto
	if err := proto.Unmarshal(data, &tp); err != nil {
		return nil, fmt.Errorf("%s: not a serialized ONNX tensor: %v", path, err)
	}
	t, err := onnx.TensorFromProto(&tp, onnx.Options{MaxTensorBytes: l.maxBytes, BaseDir: filepath.Dir(path)})
	if err != nil {
		return nil, cliError(fmt.Errorf("%s: %w", path, err))
	}
	return t, nil
}

// randomShape parses "1x512x768", or takes the declared shape when dims is
// empty, binding symbolic dims from --dim.
func (l *inputLoader) randomShape(dims string, vi *ir.ValueInfo) ([]int, error) {
	if dims != "" {
		var shape []int
		if dims == "scalar" {
			return shape, nil
		}
		for _, p := range strings.Split(dims, "x") {
			d, err := strconv.Atoi(p)
			if err != nil || d < 0 {
				return nil, usageErrorf("bad shape %q: want sizes ≥ 0 joined by x, e.g. 1x512x768", dims)
			}
			shape = append(shape, d)
		}
		return shape, nil
	}
	if !vi.Type.RankKnown {
		return nil, usageErrorf("the model declares no shape for it: give one, e.g. %s=random:1x16", vi.Name)
	}
	shape := make([]int, len(vi.Type.Shape))
	for i, d := range vi.Type.Shape {
		switch {
		case d.Known():
			shape[i] = int(d.Value)
		case d.Param != "":
			v, ok := l.dims[d.Param]
			if !ok {
				return nil, usageErrorf("dim %d is symbolic (%s): bind it with --dim %s=N, give a shape (%s=random:…), or give an input that has that dim a shape", i, d.Param, d.Param, vi.Name)
			}
			shape[i] = v
		default:
			return nil, usageErrorf("dim %d is unknown: give a shape (%s=random:…)", i, vi.Name)
		}
	}
	return shape, nil
}
