package ir

import "math"

// The narrow element types (ONNX IR 9 to 13): float8 in five encodings
// (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4e2m1, int4, uint4, int2 and
// uint2. attnrun holds them one element per byte (see DType.Storage): float
// bit patterns in the low bits of a uint8, integer values in an int8 or
// uint8. The wire format packs the 4- and 2-bit types two and four to a byte;
// package onnx packs and unpacks them. Kernels convert them (Cast, CastLike,
// QuantizeLinear, DequantizeLinear) and move them (Reshape, Transpose, ...),
// never compute with them: an op that would is refused at compile time.

// Narrow reports whether d is one of the narrow types.
func (d DType) Narrow() bool { return d >= Float8E4M3FN && d <= Int2 }

// NarrowFloat reports whether d is a narrow floating-point type (float8 or
// float4).
func (d DType) NarrowFloat() bool {
	switch d {
	case Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0, Float4E2M1:
		return true
	}
	return false
}

// NarrowIntRange returns the smallest and largest value of a narrow integer
// type (ok false for other types).
func NarrowIntRange(d DType) (lo, hi int64, ok bool) {
	switch d {
	case Int4:
		return -8, 7, true
	case Uint4:
		return 0, 15, true
	case Int2:
		return -2, 1, true
	case Uint2:
		return 0, 3, true
	}
	return 0, 0, false
}

// WrapNarrowInt keeps the low bits of v that a narrow integer type holds,
// reinterpreted as that type (two's complement for int4 and int2): Cast's
// rule for integers out of range (-9 becomes int4 7). d must be a narrow
// integer type.
func WrapNarrowInt(d DType, v int64) int64 {
	switch d {
	case Int4:
		return int64(int8(uint8(v)<<4) >> 4)
	case Uint4:
		return v & 0xf
	case Int2:
		return int64(int8(uint8(v)<<6) >> 6)
	case Uint2:
		return v & 0x3
	}
	return v
}

// miniFloat describes a narrow float encoding.
type miniFloat struct {
	expBits, manBits int
	bias             int
	// ieee: the all-ones exponent holds Inf (mantissa 0) and NaN (e5m2).
	ieee bool
	// fnuz: no negative zero; the pattern 0x80 is the only NaN.
	fnuz bool
	// nanAllOnes: the all-ones pattern (sign aside) is NaN (e4m3fn).
	nanAllOnes bool
	// noNaN: the encoding has no NaN and no Inf (float4e2m1).
	noNaN bool
}

func miniFloatOf(d DType) miniFloat {
	switch d {
	case Float8E4M3FN:
		return miniFloat{expBits: 4, manBits: 3, bias: 7, nanAllOnes: true}
	case Float8E4M3FNUZ:
		return miniFloat{expBits: 4, manBits: 3, bias: 8, fnuz: true}
	case Float8E5M2:
		return miniFloat{expBits: 5, manBits: 2, bias: 15, ieee: true}
	case Float8E5M2FNUZ:
		return miniFloat{expBits: 5, manBits: 2, bias: 16, fnuz: true}
	case Float4E2M1:
		return miniFloat{expBits: 2, manBits: 1, bias: 1, noNaN: true}
	}
	panic("ir: not a narrow float type: " + d.String())
}

func (m miniFloat) signBit() uint8 { return 1 << (m.expBits + m.manBits) }

// maxBits is the largest finite magnitude's pattern.
func (m miniFloat) maxBits() uint8 {
	all := uint8(1)<<(m.expBits+m.manBits) - 1
	switch {
	case m.ieee:
		return all - uint8(1)<<m.manBits // exponent all ones is Inf/NaN
	case m.nanAllOnes:
		return all - 1
	}
	return all
}

func (m miniFloat) nanBits(neg bool) uint8 {
	switch {
	case m.fnuz:
		return 0x80
	case m.noNaN:
		return m.signBit() // no NaN: negative zero, as ml_dtypes does
	case m.ieee:
		b := m.infBits() | uint8(1)<<(m.manBits-1) // exponent all ones, mantissa 10: quiet NaN
		if neg {
			b |= m.signBit()
		}
		return b
	}
	b := uint8(1)<<(m.expBits+m.manBits) - 1
	if neg {
		b |= m.signBit()
	}
	return b
}

// infBits is +Inf's pattern in an ieee encoding: the exponent all ones.
func (m miniFloat) infBits() uint8 { return m.maxBits() + 1 }

// decode returns the value of a pattern.
func (m miniFloat) decode(b uint8) float32 {
	sign := b&m.signBit() != 0
	mag := b &^ m.signBit()
	if m.fnuz && b == 0x80 {
		return float32(math.NaN())
	}
	exp := int(mag >> m.manBits)
	man := int(mag & (uint8(1)<<m.manBits - 1))
	allOnes := 1<<m.expBits - 1
	switch {
	case m.ieee && exp == allOnes:
		if man != 0 {
			return float32(math.NaN())
		}
		if sign {
			return float32(math.Inf(-1))
		}
		return float32(math.Inf(1))
	case m.nanAllOnes && mag == uint8(1)<<(m.expBits+m.manBits)-1:
		return float32(math.NaN())
	}
	var v float64
	if exp == 0 {
		v = math.Ldexp(float64(man), 1-m.bias-m.manBits)
	} else {
		v = math.Ldexp(float64(man+1<<m.manBits), exp-m.bias-m.manBits)
	}
	if sign {
		v = -v
	}
	return float32(v)
}

// encode rounds x to nearest even. Out of range, it saturates to ±max or,
// without saturate, gives Inf (ieee encodings) or NaN.
func (m miniFloat) encode(x float64, saturate bool) uint8 {
	neg := math.Signbit(x)
	var sign uint8
	if neg {
		sign = m.signBit()
	}
	switch {
	case math.IsNaN(x):
		return m.nanBits(neg)
	case math.IsInf(x, 0) && !saturate:
		if m.ieee {
			return sign | m.infBits()
		}
		if m.noNaN {
			return sign | m.maxBits()
		}
		return m.nanBits(neg)
	}
	ax := math.Abs(x)
	maxVal := float64(m.decode(m.maxBits()))
	minNormalExp := 1 - m.bias
	// The spacing of representable values around ax.
	e := minNormalExp
	if ax >= math.Ldexp(1, minNormalExp) {
		_, e2 := math.Frexp(ax) // ax = frac * 2^e2 with frac in [0.5, 1)
		e = e2 - 1
	}
	q := math.Ldexp(1, e-m.manBits)
	r := math.RoundToEven(ax/q) * q
	if r > maxVal || math.IsInf(ax, 0) {
		if saturate || m.noNaN {
			return sign | m.maxBits()
		}
		if m.ieee {
			return sign | m.infBits()
		}
		return m.nanBits(neg)
	}
	if r == 0 {
		if m.fnuz {
			return 0 // no negative zero
		}
		return sign
	}
	var bits uint8
	if r < math.Ldexp(1, minNormalExp) {
		bits = uint8(r / math.Ldexp(1, minNormalExp-m.manBits))
	} else {
		frac, e2 := math.Frexp(r)
		exp := e2 - 1 + m.bias
		man := uint8(math.Round((frac*2 - 1) * float64(int(1)<<m.manBits)))
		bits = uint8(exp)<<m.manBits | man
	}
	return sign | bits
}

// NarrowFloatToFloat32 returns the value of a narrow float pattern of type d
// (float8 in any encoding, or float4e2m1).
func NarrowFloatToFloat32(d DType, b uint8) float32 {
	if d == Float8E8M0 {
		if b == 0xff {
			return float32(math.NaN())
		}
		return float32(math.Ldexp(1, int(b)-127))
	}
	return miniFloatOf(d).decode(b)
}

// NarrowFloatFrom converts x to a float8 or float4e2m1 pattern of type d
// (not float8e8m0: see Float32ToFloat8E8M0), rounding to nearest even once
// (a float64 does not round through float32 first). Out of
// range, with saturate a finite value and ±Inf become ±max; without it they
// become ±Inf (float8e5m2) or NaN. float4e2m1, which has neither, always
// saturates, and maps NaN to negative zero (as ml_dtypes, which ONNX's
// reference uses). The fnuz encodings have no negative zero: -0 becomes 0.
func NarrowFloatFrom(d DType, x float64, saturate bool) uint8 {
	return miniFloatOf(d).encode(x, saturate)
}

// E8M0Rounding selects how Float32ToFloat8E8M0 rounds a value that is not a
// power of two.
type E8M0Rounding int

// The rounding modes of Cast's round_mode attribute.
const (
	E8M0Up      E8M0Rounding = iota // up: away from zero (the next power of two)
	E8M0Down                        // down: toward zero
	E8M0Nearest                     // nearest, ties up
)

// Float32ToFloat8E8M0 converts f to float8e8m0 (a biased power-of-two
// exponent; 0xff is NaN), as ONNX's reference does: only f's exponent and
// mantissa bits are read (the sign is ignored, negative values are undefined
// in ONNX), NaN and ±Inf give 0xff, and with saturate rounding never goes
// past the largest exponent 0xfe.
func Float32ToFloat8E8M0(f float32, saturate bool, mode E8M0Rounding) uint8 {
	bits := math.Float32bits(f)
	exp := uint16(bits>>23) & 0xff
	if exp == 0xff {
		return 0xff
	}
	var up bool
	switch mode {
	case E8M0Up:
		up = bits&0x7fffff != 0
	case E8M0Nearest:
		g := bits&0x400000 != 0
		r := bits&0x200000 != 0
		s := bits&0x1fffff != 0
		up = g && (r || s || exp > 0)
	}
	if up && !(saturate && exp == 0xfe) {
		exp++
	}
	return uint8(exp)
}
