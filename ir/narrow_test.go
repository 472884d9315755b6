package ir

import (
	"math"
	"testing"
)

// Every finite pattern of every narrow float survives decode → encode, with
// and without saturate.
func TestNarrowFloatRoundTrip(t *testing.T) {
	for _, d := range []DType{Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float4E2M1} {
		n := 256
		if d == Float4E2M1 {
			n = 16
		}
		for b := 0; b < n; b++ {
			v := NarrowFloatToFloat32(d, uint8(b))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				continue
			}
			for _, sat := range []bool{true, false} {
				if got := NarrowFloatFrom(d, float64(v), sat); got != uint8(b) {
					t.Errorf("%v: %#02x decodes to %g, which encodes to %#02x (saturate %v)", d, b, v, got, sat)
				}
			}
		}
	}
}

func TestNarrowFloatEncode(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		d    DType
		x    float64
		sat  bool
		want uint8
	}{
		{Float8E4M3FN, 448, true, 0x7e},
		{Float8E4M3FN, 464, false, 0x7e}, // the tie between 448 and 480 rounds to even, in range
		{Float8E4M3FN, 465, false, 0x7f}, // rounds past 448: NaN without saturate
		{Float8E4M3FN, 465, true, 0x7e},
		{Float8E4M3FN, -inf, true, 0xfe},
		{Float8E4M3FN, 1.0625, true, 0x38},             // tie between 1 and 1.125: even
		{Float8E4M3FN, 1.1875, true, 0x3a},             // tie between 1.125 and 1.25: even
		{Float8E4M3FN, math.Ldexp(1, -9), true, 0x01},  // smallest subnormal
		{Float8E4M3FN, math.Ldexp(1, -10), true, 0x00}, // half of it: ties to even zero
		{Float8E4M3FN, -math.Ldexp(3, -11), true, 0x81},
		{Float8E4M3FNUZ, -math.Ldexp(1, -12), true, 0x00}, // no negative zero
		{Float8E4M3FNUZ, 240, true, 0x7f},
		{Float8E4M3FNUZ, -1e9, false, 0x80},
		{Float8E5M2, 57344, true, 0x7b},
		{Float8E5M2, 1e9, false, 0x7c},
		{Float8E5M2, -inf, false, 0xfc},
		{Float8E5M2, math.NaN(), true, 0x7e},
		{Float8E5M2FNUZ, math.NaN(), false, 0x80},
		{Float8E5M2FNUZ, -57344, true, 0xff},
		{Float4E2M1, 5, true, 0x6}, // tie between 4 and 6: even mantissa
		{Float4E2M1, -0.75, true, 0xa},
		{Float4E2M1, 100, false, 0x7}, // float4 has no Inf or NaN: it saturates
	}
	for _, c := range cases {
		if got := NarrowFloatFrom(c.d, c.x, c.sat); got != c.want {
			t.Errorf("NarrowFloatFrom(%v, %g, %v) = %#02x, want %#02x", c.d, c.x, c.sat, got, c.want)
		}
	}
}

func TestFloat8E8M0(t *testing.T) {
	cases := []struct {
		x    float32
		sat  bool
		mode E8M0Rounding
		want uint8
	}{
		{1, true, E8M0Up, 127},
		{1.01, true, E8M0Up, 128},
		{1.9, true, E8M0Down, 127},
		{1.5, true, E8M0Nearest, 128}, // ties up
		{1.49, true, E8M0Nearest, 127},
		{float32(math.Ldexp(1.5, 127)), true, E8M0Up, 0xfe}, // saturates at the largest exponent
		{float32(math.Ldexp(1.5, 127)), false, E8M0Up, 0xff},
		{float32(math.Inf(1)), true, E8M0Up, 0xff},
		{0, true, E8M0Up, 0},
	}
	for _, c := range cases {
		if got := Float32ToFloat8E8M0(c.x, c.sat, c.mode); got != c.want {
			t.Errorf("Float32ToFloat8E8M0(%g, %v, %v) = %d, want %d", c.x, c.sat, c.mode, got, c.want)
		}
	}
	if v := NarrowFloatToFloat32(Float8E8M0, 127); v != 1 {
		t.Errorf("e8m0 127 = %g, want 1", v)
	}
	if v := NarrowFloatToFloat32(Float8E8M0, 0); v != float32(math.Ldexp(1, -127)) {
		t.Errorf("e8m0 0 = %g, want 2^-127", v)
	}
	if v := NarrowFloatToFloat32(Float8E8M0, 0xff); !math.IsNaN(float64(v)) {
		t.Errorf("e8m0 0xff = %g, want NaN", v)
	}
}

func TestWrapNarrowInt(t *testing.T) {
	cases := []struct {
		d       DType
		in, out int64
	}{
		{Int4, -9, 7}, {Int4, 8, -8}, {Int4, 15, -1}, {Uint4, -1, 15}, {Uint4, 16, 0},
		{Int2, 2, -2}, {Int2, -3, 1}, {Uint2, -1, 3}, {Uint2, 5, 1},
	}
	for _, c := range cases {
		if got := WrapNarrowInt(c.d, c.in); got != c.out {
			t.Errorf("WrapNarrowInt(%v, %d) = %d, want %d", c.d, c.in, got, c.out)
		}
		lo, hi, ok := NarrowIntRange(c.d)
		if !ok || c.out < lo || c.out > hi {
			t.Errorf("%v: %d outside [%d, %d]", c.d, c.out, lo, hi)
		}
	}
}

func TestNarrowStorage(t *testing.T) {
	for d := Float8E4M3FN; d <= Int2; d++ {
		if !d.Narrow() || !d.Known() || d.Size() != 1 || d.IsInt() || d.IsFloat() {
			t.Errorf("%v: Narrow %v Known %v Size %d IsInt %v IsFloat %v", d, d.Narrow(), d.Known(), d.Size(), d.IsInt(), d.IsFloat())
		}
		x := NewTensor(d, []int{2, 3})
		if err := x.Check(); err != nil {
			t.Errorf("%v: %v", d, err)
		}
		_, err := x.AsInt64s()
		if _, _, isInt := NarrowIntRange(d); isInt != (err == nil) {
			t.Errorf("%v: AsInt64s error %v", d, err)
		}
	}
	if Float16.Storage() != Uint16 || Int4.Storage() != Int8 || Float8E5M2.Storage() != Uint8 || Float.Storage() != Float {
		t.Error("Storage")
	}
}
