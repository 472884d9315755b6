package ops

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// Test helpers shared by the elementwise op tests (prefixed ew to stay out
// of other op families' way).

// ewT builds a tensor from a Go slice.
func ewT(shape []int, data any) *ir.Tensor { return ir.FromSlice(shape, data) }

// ewF16 builds a float16 tensor from float32 values.
func ewF16(shape []int, vals ...float32) *ir.Tensor {
	h := make([]uint16, len(vals))
	float32ToHalf(h, vals)
	return &ir.Tensor{DType: ir.Float16, Shape: shape, Data: h}
}

// ewNode makes a node of op with one input name per tensor.
func ewNode(op string, nIn int, attrs ...*ir.Attribute) *ir.Node {
	n := &ir.Node{Name: "n", OpType: op, Outputs: []string{"y"}, Attrs: attrs}
	for i := 0; i < nIn; i++ {
		n.Inputs = append(n.Inputs, fmt.Sprintf("x%d", i))
	}
	return n
}

// ewIntAttr makes an int attribute.
func ewIntAttr(name string, v int64) *ir.Attribute {
	return &ir.Attribute{Name: name, Type: ir.AttrInt, Int: v}
}

// ewRun looks op up at opset, runs it, and checks that Infer on the
// inputs' concrete types agrees with the result's type and shape.
func ewRun(t *testing.T, op string, opset int, attrs []*ir.Attribute, in ...*ir.Tensor) (*ir.Tensor, error) {
	t.Helper()
	s, err := Lookup(DomainONNX, op, opset)
	if err != nil {
		return nil, err
	}
	n := ewNode(op, len(in), attrs...)
	if err := s.CheckArity(n); err != nil {
		return nil, err
	}
	outs, err := s.Run(&Context{Opset: opset, Threads: 1}, n, in)
	if err != nil {
		return nil, err
	}
	if len(outs) != 1 {
		t.Fatalf("%s returned %d outputs", op, len(outs))
	}
	out := outs[0]
	if err := out.Check(); err != nil {
		t.Fatalf("%s output: %v", op, err)
	}
	vals := make([]Value, len(in))
	for i, x := range in {
		vals[i] = Value{Type: Known(x.DType, x.Shape)}
	}
	inf, err := s.Infer(n, opset, vals)
	if err != nil {
		t.Fatalf("%s: Run succeeded but Infer failed: %v", op, err)
	}
	if want := Known(out.DType, out.Shape); !reflect.DeepEqual(inf[0].Type, want) {
		t.Fatalf("%s: Infer says %v, Run gave %v", op, inf[0].Type, want)
	}
	return out, nil
}

// ewValues returns a tensor's elements as float64 (float16 decoded) or,
// for bools and strings, as themselves.
func ewValues(x *ir.Tensor) []any {
	var vs []any
	switch d := x.Data.(type) {
	case []uint16:
		for _, v := range d {
			if x.DType == ir.Float16 {
				vs = append(vs, float64(ir.Float16ToFloat32(v)))
			} else {
				vs = append(vs, float64(v))
			}
		}
		return vs
	case []bool:
		for _, v := range d {
			vs = append(vs, v)
		}
		return vs
	case []string:
		for _, v := range d {
			vs = append(vs, v)
		}
		return vs
	}
	f, err := toFloat64s(x)
	if err != nil {
		panic(err)
	}
	for _, v := range f {
		vs = append(vs, v)
	}
	return vs
}

// ewCheck compares got with want exactly (NaN equals NaN); int64 values
// are compared as int64 so that large ones are exact.
func ewCheck(t *testing.T, got, want *ir.Tensor) {
	t.Helper()
	if got.DType != want.DType || !SameShape(got.Shape, want.Shape) {
		t.Fatalf("got %v%v, want %v%v", got.DType, got.Shape, want.DType, want.Shape)
	}
	if g, ok := got.Data.([]int64); ok {
		if !reflect.DeepEqual(g, want.Data.([]int64)) && !(len(g) == 0 && want.Len() == 0) {
			t.Fatalf("got %v, want %v", g, want.Data)
		}
		return
	}
	gv, wv := ewValues(got), ewValues(want)
	for i := range gv {
		g, w := gv[i], wv[i]
		if gf, ok := g.(float64); ok {
			wf := w.(float64)
			if gf == wf || (math.IsNaN(gf) && math.IsNaN(wf)) {
				continue
			}
			if math.Abs(gf-wf) <= 1e-6*math.Abs(wf) && got.DType != ir.Float16 {
				continue
			}
		} else if g == w {
			continue
		}
		t.Fatalf("element %d: got %v, want %v (got %v, want %v)", i, g, w, got, want)
	}
}

// ewCase is one table row: op at opset on inputs, and either the expected
// output or a substring of the expected error.
type ewCase struct {
	name    string
	op      string
	opset   int
	attrs   []*ir.Attribute
	in      []*ir.Tensor
	want    *ir.Tensor
	wantErr string
}

func ewRunCases(t *testing.T, cases []ewCase) {
	t.Helper()
	runCasesWith(t, cases, func(t *testing.T, c ewCase, opset int) (*ir.Tensor, error) {
		return ewRun(t, c.op, opset, c.attrs, c.in...)
	})
}

// runCasesWith runs each case through run at its opset (default 17) and
// checks the error or the output against the case.
func runCasesWith(t *testing.T, cases []ewCase, run func(t *testing.T, c ewCase, opset int) (*ir.Tensor, error)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opset := c.opset
			if opset == 0 {
				opset = 17
			}
			got, err := run(t, c, opset)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ewCheck(t, got, c.want)
		})
	}
}

// ewSym makes a symbolic shape: ints are sizes, strings are symbols, nil is unknown.
func ewSym(dims ...any) ir.Shape {
	s := ir.Shape{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			s = append(s, ir.Dim{Value: int64(d)})
		case string:
			s = append(s, ir.Dim{Param: d})
		default:
			s = append(s, ir.UnknownDim)
		}
	}
	return s
}

// ewInferCase is one Infer table row.
type ewInferCase struct {
	name    string
	op      string
	opset   int
	attrs   []*ir.Attribute
	in      []Value
	want    Value
	wantErr string
}

func ewInferCases(t *testing.T, cases []ewInferCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opset := c.opset
			if opset == 0 {
				opset = 17
			}
			var got []Value
			s, err := Lookup(DomainONNX, c.op, opset)
			if err == nil {
				got, err = s.Infer(ewNode(c.op, len(c.in), c.attrs...), opset, c.in)
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// ewTyped is Typed with an ewSym shape.
func ewTyped(dt ir.DType, dims ...any) Value { return Typed(dt, ewSym(dims...)) }
