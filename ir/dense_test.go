package ir

import (
	"reflect"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

func TestDenseRoundTrip(t *testing.T) {
	cases := []struct {
		name  string
		in    *Tensor
		dense tensor.Dtype
		shape tensor.Shape
	}{
		{"float32 2x3", FromSlice([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}), tensor.Float32, tensor.Shape{2, 3}},
		{"float64", FromSlice([]int{2}, []float64{1.5, -2}), tensor.Float64, tensor.Shape{2}},
		{"int64", FromSlice([]int{1, 2}, []int64{-7, 9}), tensor.Int64, tensor.Shape{1, 2}},
		{"int32", FromSlice([]int{2}, []int32{1, -1}), tensor.Int32, tensor.Shape{2}},
		{"int16", FromSlice([]int{2}, []int16{1, -1}), tensor.Int16, tensor.Shape{2}},
		{"int8", FromSlice([]int{2}, []int8{1, -1}), tensor.Int8, tensor.Shape{2}},
		{"uint8", FromSlice([]int{2}, []uint8{1, 255}), tensor.Uint8, tensor.Shape{2}},
		{"uint16", FromSlice([]int{2}, []uint16{1, 65535}), tensor.Uint16, tensor.Shape{2}},
		{"uint32", FromSlice([]int{2}, []uint32{1, 7}), tensor.Uint32, tensor.Shape{2}},
		{"uint64", FromSlice([]int{2}, []uint64{1, 1 << 63}), tensor.Uint64, tensor.Shape{2}},
		{"bool", FromSlice([]int{3}, []bool{true, false, true}), tensor.Bool, tensor.Shape{3}},
		{"string", FromSlice([]int{2}, []string{"a", "bc"}), tensor.String, tensor.Shape{2}},
		{"scalar float32", Scalar(float32(2.5)), tensor.Float32, tensor.Shape{}},
		{"scalar int64", Scalar(int64(-3)), tensor.Int64, tensor.Shape{}},
		{"scalar bool", Scalar(true), tensor.Bool, tensor.Shape{}},
		{"zero-size 0x3", FromSlice([]int{0, 3}, []float32{}), tensor.Float32, tensor.Shape{0, 3}},
		{"zero-size 2x0x4 bool", FromSlice([]int{2, 0, 4}, []bool{}), tensor.Bool, tensor.Shape{2, 0, 4}},
		{"one element 1x1", FromSlice([]int{1, 1}, []float32{4}), tensor.Float32, tensor.Shape{1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := ToDense(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Dtype() != c.dense {
				t.Errorf("dense dtype %v, want %v", d.Dtype(), c.dense)
			}
			if !d.Shape().Eq(c.shape) || len(d.Shape()) != len(c.shape) {
				t.Errorf("dense shape %v, want %v", d.Shape(), c.shape)
			}
			back, err := FromDense(d)
			if err != nil {
				t.Fatal(err)
			}
			if back.DType != c.in.DType {
				t.Errorf("dtype %v, want %v", back.DType, c.in.DType)
			}
			if len(back.Shape) != len(c.in.Shape) || (len(c.in.Shape) > 0 && !reflect.DeepEqual(back.Shape, c.in.Shape)) {
				t.Errorf("shape %v, want %v", back.Shape, c.in.Shape)
			}
			if !reflect.DeepEqual(back.Data, c.in.Data) {
				t.Errorf("data %v, want %v", back.Data, c.in.Data)
			}
			if err := back.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDenseSharesMemory(t *testing.T) {
	x := FromSlice([]int{2, 2}, []float32{1, 2, 3, 4})
	d, err := ToDense(x)
	if err != nil {
		t.Fatal(err)
	}
	d.Data().([]float32)[0] = 42
	if x.Float32s()[0] != 42 {
		t.Errorf("ToDense copied the data: x[0] = %v", x.Float32s()[0])
	}
	y, err := FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	y.Float32s()[3] = -1
	if d.Data().([]float32)[3] != -1 {
		t.Errorf("FromDense copied the data")
	}
}

func TestDenseFloat16(t *testing.T) {
	h := &Tensor{DType: Float16, Shape: []int{2}, Data: []uint16{Float32ToFloat16(1), Float32ToFloat16(-2)}}
	d, err := ToDense(h)
	if err != nil {
		t.Fatal(err)
	}
	if d.Dtype() != tensor.Uint16 {
		t.Fatalf("float16 stored as %v, want uint16", d.Dtype())
	}
	plain, err := FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	if plain.DType != Uint16 {
		t.Errorf("FromDense dtype %v, want uint16", plain.DType)
	}
	back, err := FromDenseAs(d, Float16)
	if err != nil {
		t.Fatal(err)
	}
	if back.DType != Float16 || Float16ToFloat32(back.Data.([]uint16)[1]) != -2 {
		t.Errorf("FromDenseAs gave %v", back)
	}
	if _, err := FromDenseAs(d, Float); err == nil || !strings.Contains(err.Error(), "cannot hold float32") {
		t.Errorf("FromDenseAs(uint16 dense, float32) error = %v", err)
	}
}

func TestDenseTransposedView(t *testing.T) {
	d := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
	if err := d.T(); err != nil {
		t.Fatal(err)
	}
	x, err := FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 4, 2, 5, 3, 6}
	if !reflect.DeepEqual(x.Shape, []int{3, 2}) || !reflect.DeepEqual(x.Data, want) {
		t.Errorf("transposed view gave %v %v, want [3 2] %v", x.Shape, x.Data, want)
	}
}

func TestDenseGoInt(t *testing.T) {
	d := tensor.New(tensor.WithShape(3), tensor.WithBacking([]int{1, -2, 3}))
	x, err := FromDense(d)
	if err != nil {
		t.Fatal(err)
	}
	if x.DType != Int64 || !reflect.DeepEqual(x.Data, []int64{1, -2, 3}) {
		t.Errorf("int dense gave %v", x)
	}
	s := tensor.New(tensor.FromScalar(7))
	y, err := FromDense(s)
	if err != nil {
		t.Fatal(err)
	}
	if y.DType != Int64 || len(y.Shape) != 0 || y.Int64s()[0] != 7 {
		t.Errorf("int scalar dense gave %v", y)
	}
}

func TestDenseErrors(t *testing.T) {
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"nil", func() error { _, err := FromDense(nil); return err }, "from dense: nil tensor"},
		{"complex", func() error {
			_, err := FromDense(tensor.New(tensor.WithShape(1), tensor.WithBacking([]complex64{1})))
			return err
		}, "from dense: gorgonia dtype complex64 has no attnrun dtype"},
		{"bad tensor", func() error {
			_, err := ToDense(&Tensor{DType: Float, Shape: []int{3}, Data: []float32{1}})
			return err
		}, "to dense: shape [3] needs 3 elements, data has 1"},
		{"undefined", func() error {
			_, err := DenseDType(Undefined)
			return err
		}, "dtype undefined has no gorgonia tensor type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}
