// Package conform checks a runtime against test cases in ONNX's backend-test
// layout: a directory holding model.onnx and test_data_set_N/ folders of
// input_K.pb / output_K.pb TensorProtos. It is what `attnrun conform` runs.
package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/onnx"
)

// Case is one test-case directory.
type Case struct {
	Name     string   // the directory's base name
	Dir      string   // path to the directory
	DataSets []string // test_data_set_N directories, sorted
	// BF16, from the case's bf16_tolerance.json, is the tolerance a run
	// with bf16 products is held to instead of BF16Tolerance, for a model
	// whose own numerics amplify bf16's rounding; nil for the others.
	BF16 *CaseTolerance
}

// CaseTolerance is a case's own bf16 tolerance (bf16_tolerance.json, which
// models/export.py writes), with why it needs one and how far PyTorch's
// own bf16 (CPU autocast) is from its fp32 outputs on data set 0.
type CaseTolerance struct {
	Tolerance
	Why       string  `json:"why"`
	TorchBF16 float64 `json:"torch_bf16_autocast_max_abs"`
}

// BF16For returns the tolerance a bf16 run of c is held to: c's own, or
// BF16Tolerance.
func (c Case) BF16For() Tolerance {
	if c.BF16 != nil {
		return c.BF16.Tolerance
	}
	return BF16Tolerance
}

// readCaseTolerance reads dir/bf16_tolerance.json; nil when there is none.
func readCaseTolerance(dir string) (*CaseTolerance, error) {
	path := filepath.Join(dir, "bf16_tolerance.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var t CaseTolerance // Rtol and Atol read as "rtol" and "atol"
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.Rtol < 0 || t.Atol < 0 || t.Why == "" {
		return nil, fmt.Errorf("%s: rtol and atol must be ≥ 0 and why must say why the model needs them", path)
	}
	return &t, nil
}

// Find returns the cases at or under each path: a directory holding
// model.onnx is a case; any other directory is searched recursively.
func Find(paths []string) ([]Case, error) {
	var cases []Case
	seen := map[string]bool{}
	for _, root := range paths {
		st, err := os.Stat(root)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s: not a directory (conform takes test-case directories or their parents)", root)
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if _, err := os.Stat(filepath.Join(path, "model.onnx")); err != nil {
				return nil
			}
			if !seen[path] {
				seen[path] = true
				c, err := caseAt(path)
				if err != nil {
					return err
				}
				cases = append(cases, c)
			}
			return filepath.SkipDir
		})
		if err != nil {
			return nil, err
		}
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("no test cases (directories with model.onnx) under %s", strings.Join(paths, ", "))
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].Dir < cases[j].Dir })
	return cases, nil
}

func caseAt(dir string) (Case, error) {
	sets, err := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if err != nil {
		return Case{}, err
	}
	sort.Strings(sets)
	bf16, err := readCaseTolerance(dir)
	if err != nil {
		return Case{}, err
	}
	return Case{Name: filepath.Base(dir), Dir: dir, DataSets: sets, BF16: bf16}, nil
}

// Tolerance is numpy's assert_allclose rule: |got-want| ≤ Atol + Rtol·|want|.
type Tolerance struct {
	Rtol, Atol float64
}

// BF16Tolerance is the tolerance for runs with bf16 matrix products
// (ops.PrecisionBF16) against fp32 references: Rtol 2e-2, Atol 1e-2.
// bfloat16 keeps 8 significant bits, so every operand of a product is
// rounded with a relative error up to 2^-9 ≈ 2e-3; a sum of k such
// products (accumulated in fp32) is off by about that much of the sum of
// the terms' magnitudes, not of the result, and an attention layer chains
// two to four products. Elements near zero keep no relative accuracy at
// all, hence the absolute term, sized for outputs of order one. On the
// bundled models the largest error is 8e-3, fused or not
// (TestModelsInProcessBF16), bar Swin V2's cosine attention, which holds
// its own (Case.BF16).
var BF16Tolerance = Tolerance{Rtol: 2e-2, Atol: 1e-2}

// Runner runs one loaded model.
type Runner interface {
	// InputNames and OutputNames list the graph's inputs and outputs in order.
	InputNames() []string
	OutputNames() []string
	Run(ctx context.Context, inputs map[string]*ir.Tensor) (map[string]*ir.Tensor, error)
	Close() error
}

// Opener loads a model for running.
type Opener func(ctx context.Context, modelPath string) (Runner, error)

// Result is the outcome of one case over all its data sets.
type Result struct {
	Case Case
	Pass bool
	// Compared counts the outputs compared with their expected values,
	// over all data sets. MaxAbs and MaxRel describe those comparisons:
	// they mean nothing when Compared is 0 (a case that failed before any
	// output could be compared).
	Compared int
	MaxAbs   float64 // largest |got - want| over all outputs and data sets
	MaxRel   float64 // largest |got - want| / |want| (where want ≠ 0)
	Err      error   // why it failed: a load or run error, or the first mismatch
}

// Run checks one case: it loads the model once and runs every data set.
// A case passes only when every data set checks every graph output: each
// output K must have its expected output_K.pb, and every output_K.pb must
// match a graph output (the K-th, as in ONNX's backend tests).
func Run(ctx context.Context, c Case, open Opener, tol Tolerance) Result {
	res := Result{Case: c}
	if len(c.DataSets) == 0 {
		res.Err = fmt.Errorf("no test_data_set_* directories")
		return res
	}
	r, err := open(ctx, filepath.Join(c.Dir, "model.onnx"))
	if err != nil {
		res.Err = err
		return res
	}
	defer r.Close()
	for _, ds := range c.DataSets {
		inputs, err := readNumbered(ds, "input", r.InputNames())
		if err != nil {
			res.Err = err
			return res
		}
		outNames := r.OutputNames()
		wants, err := readExpected(ds, outNames)
		if err != nil {
			res.Err = err
			return res
		}
		got, err := r.Run(ctx, inputs)
		if err != nil {
			res.Err = fmt.Errorf("%s: %w", filepath.Base(ds), err)
			return res
		}
		for _, name := range outNames {
			g, ok := got[name]
			if !ok {
				res.Err = fmt.Errorf("%s: output %q missing from the run's results", filepath.Base(ds), name)
				return res
			}
			a, rel, err := Compare(g, wants[name], tol)
			res.Compared++
			res.MaxAbs, res.MaxRel = math.Max(res.MaxAbs, a), math.Max(res.MaxRel, rel)
			if err != nil && res.Err == nil {
				res.Err = fmt.Errorf("%s: output %q: %w", filepath.Base(ds), name, err)
			}
		}
	}
	if res.Err == nil && res.Compared == 0 {
		res.Err = fmt.Errorf("the model has no outputs: nothing was checked")
	}
	res.Pass = res.Err == nil
	return res
}

// readExpected reads a data set's output_K.pb files: exactly one for each
// graph output, matched by index K (the name stored in a file is not used,
// as in ONNX's own backend test runner).
func readExpected(dir string, names []string) (map[string]*ir.Tensor, error) {
	out, err := readNumbered(dir, "output", names)
	if err != nil {
		return nil, err
	}
	for k, name := range names {
		if out[name] == nil {
			return nil, fmt.Errorf("%s: output_%d.pb is missing: graph output %d (%q) has no expected value", filepath.Base(dir), k, k, name)
		}
	}
	return out, nil
}

// readNumbered reads a data set's <prefix>_K.pb files (prefix "input" or
// "output"), each for the graph value names[K]; a file whose K has no
// graph value is an error. Values without a file are left out.
func readNumbered(dir, prefix string, names []string) (map[string]*ir.Tensor, error) {
	files, err := numberedFiles(dir, prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ir.Tensor, len(files))
	for _, k := range slices.Sorted(maps.Keys(files)) {
		f := files[k]
		if k >= len(names) {
			return nil, fmt.Errorf("%s: %s has no graph %s to match (the model has %d %s%s: %s)",
				filepath.Base(dir), filepath.Base(f), prefix, len(names), prefix, plural(len(names)), strings.Join(names, ", "))
		}
		if out[names[k]], err = readTensor(f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// numberedFiles maps K to dir/<prefix>_K.pb for every such file.
func numberedFiles(dir, prefix string) (map[int]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+"_*.pb"))
	if err != nil {
		return nil, err
	}
	out := make(map[int]string, len(files))
	for _, f := range files {
		digits := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), prefix+"_"), ".pb")
		if k, err := strconv.Atoi(digits); err == nil && k >= 0 && strconv.Itoa(k) == digits {
			out[k] = f
		}
	}
	return out, nil
}

// readTensor reads one serialized TensorProto (its stored name is not
// used: files match graph values by index).
func readTensor(path string) (*ir.Tensor, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_, t, err := onnx.DecodeTensor(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Compare checks got against want: same dtype and shape, and every element
// within tolerance (NaN matches NaN, ±Inf must match exactly). It returns
// the largest absolute and relative errors.
func Compare(got, want *ir.Tensor, tol Tolerance) (maxAbs, maxRel float64, err error) {
	if got.DType == ir.BFloat16 && want.DType == ir.Uint16 {
		// numpy has no bfloat16, so ONNX's test data stores expected
		// bfloat16 outputs as their uint16 bit patterns.
		want = &ir.Tensor{DType: ir.BFloat16, Shape: want.Shape, Data: want.Data}
	}
	if got.DType != want.DType {
		return 0, 0, fmt.Errorf("dtype %v, want %v", got.DType, want.DType)
	}
	if ir.ShapeString(got.Shape) != ir.ShapeString(want.Shape) {
		return 0, 0, fmt.Errorf("shape [%s], want [%s]", ir.ShapeString(got.Shape), ir.ShapeString(want.Shape))
	}
	if !got.DType.IsFloat() {
		gi, err1 := got.AsInt64s()
		wi, err2 := want.AsInt64s()
		if err1 == nil && err2 == nil {
			for i := range gi {
				if gi[i] != wi[i] {
					return math.Abs(float64(gi[i] - wi[i])), 0, fmt.Errorf("element %d is %d, want %d", i, gi[i], wi[i])
				}
			}
			return 0, 0, nil
		}
	}
	g, w := asFloat64s(got), asFloat64s(want)
	if g == nil || w == nil {
		if fmt.Sprint(got.Data) != fmt.Sprint(want.Data) {
			return 0, 0, fmt.Errorf("values differ")
		}
		return 0, 0, nil
	}
	bad := -1
	for i := range g {
		a, b := g[i], w[i]
		if math.IsNaN(a) || math.IsNaN(b) {
			if math.IsNaN(a) != math.IsNaN(b) && bad < 0 {
				bad = i
			}
			continue
		}
		if math.IsInf(a, 0) || math.IsInf(b, 0) {
			if a != b && bad < 0 {
				bad = i
			}
			continue
		}
		d := math.Abs(a - b)
		maxAbs = math.Max(maxAbs, d)
		if b != 0 {
			maxRel = math.Max(maxRel, d/math.Abs(b))
		}
		if d > tol.Atol+tol.Rtol*math.Abs(b) && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		err = fmt.Errorf("element %d is %.8g, want %.8g (atol %g, rtol %g)", bad, g[bad], w[bad], tol.Atol, tol.Rtol)
	}
	return maxAbs, maxRel, err
}

// asFloat64s widens numeric data for comparison; nil for strings.
func asFloat64s(t *ir.Tensor) []float64 {
	switch d := t.Data.(type) {
	case []float32:
		return widen(d)
	case []float64:
		return d
	case []uint16:
		if t.DType == ir.Float16 || t.DType == ir.BFloat16 {
			out := make([]float64, len(d))
			for i, v := range d {
				if t.DType == ir.BFloat16 {
					out[i] = float64(ir.BFloat16ToFloat32(v))
				} else {
					out[i] = float64(ir.Float16ToFloat32(v))
				}
			}
			return out
		}
		return widen(d)
	case []int64:
		return widen(d)
	case []int32:
		return widen(d)
	case []int16:
		return widen(d)
	case []int8:
		return widen(d)
	case []uint8:
		if t.DType.NarrowFloat() {
			out := make([]float64, len(d))
			for i, v := range d {
				out[i] = float64(ir.NarrowFloatToFloat32(t.DType, v))
			}
			return out
		}
		return widen(d)
	case []uint32:
		return widen(d)
	case []uint64:
		return widen(d)
	case []bool:
		out := make([]float64, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out
	}
	return nil
}

func widen[T float32 | int64 | int32 | int16 | int8 | uint8 | uint16 | uint32 | uint64](s []T) []float64 {
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}
