package ir

import (
	"math"
	"testing"
)

func TestBFloat16(t *testing.T) {
	cases := []struct {
		in   float32
		bits uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{0.47851562, 0x3ef5}, // exact in bfloat16
		{0.48, 0x3ef6},       // rounds up (truncation would give 0x3ef5)
		{float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie → even
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie → even (up)
	}
	for _, c := range cases {
		if got := Float32ToBFloat16(c.in); got != c.bits {
			t.Errorf("Float32ToBFloat16(%g) = %#04x, want %#04x", c.in, got, c.bits)
		}
	}
	if got := BFloat16ToFloat32(0x3f80); got != 1 {
		t.Errorf("BFloat16ToFloat32(0x3f80) = %g, want 1", got)
	}
	if nan := BFloat16ToFloat32(Float32ToBFloat16(float32(math.NaN()))); nan == nan {
		t.Error("NaN did not survive a bfloat16 round trip")
	}
}
