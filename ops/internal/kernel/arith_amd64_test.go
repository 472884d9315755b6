package kernel

import (
	"math"
	"math/rand"
	"testing"
)

// specials are the float32 values the kernel tests mix in.
var specials = []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-38}

// arithKernels are the float32 binary kernels with Go's scalar operation
// each must match, by operand form.
var arithKernels = []struct {
	name string
	op   func(a, b float32) float32
	vv   func(dst, a, b *float32, n int)
	vs   func(dst, a *float32, b float32, n int)
	sv   func(dst *float32, a float32, b *float32, n int) // nil: vs with the operands swapped
}{
	{"Add", func(a, b float32) float32 { return a + b }, AddVV, AddVS, nil},
	{"Sub", func(a, b float32) float32 { return a - b }, SubVV, SubVS, SubSV},
	{"Mul", func(a, b float32) float32 { return a * b }, MulVV, MulVS, nil},
	{"Div", func(a, b float32) float32 { return a / b }, DivVV, DivVS, DivSV},
}

// arithValues returns n float32s mixing ordinary values of several
// magnitudes with specials, subnormals and NaNs of distinct payloads.
func arithValues(rng *rand.Rand, n int) []float32 {
	extra := []float32{
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00002), // quiet NaNs
		math.Float32frombits(0x7f800003),                                   // a signaling NaN
		math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff), // subnormals
		1e-20, 3e30,
	}
	v := make([]float32, n)
	for i := range v {
		switch rng.Intn(6) {
		case 0:
			v[i] = specials[rng.Intn(len(specials))]
		case 1:
			v[i] = extra[rng.Intn(len(extra))]
		default:
			v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(9)-4)))
		}
	}
	return v
}

// sameArith reports whether got is want bit for bit, except that where
// both operands x and y are NaN, got may be either one's (quieted) NaN:
// which one Go's compiler picks for + and · is checked in package ops,
// against its real loops.
func sameArith(got, want, x, y float32) bool {
	g := math.Float32bits(got)
	if g == math.Float32bits(want) {
		return true
	}
	if x != x && y != y {
		return g == math.Float32bits(x)|0x400000 || g == math.Float32bits(y)|0x400000
	}
	return false
}

// TestArithKernels checks the vv, vs and sv kernels against Go's scalar
// float32 operations, element by element and bit for bit, for every
// length up to 70 and a few longer ones (the unrolled loop, the 16-lane
// loop, the masked tail), out of place and in place, and that they write
// nothing past n.
func TestArithKernels(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewSource(1))
	sizes := []int{129, 1000, 4099}
	for n := 0; n <= 70; n++ {
		sizes = append(sizes, n)
	}
	const guard = 17
	canary := math.Float32frombits(0x7fc0dead)
	for _, k := range arithKernels {
		for _, n := range sizes {
			a := arithValues(rng, n+guard)
			b := arithValues(rng, n+guard)
			s := arithValues(rng, 1)[0]
			check := func(form string, dst []float32, x, y func(i int) float32) {
				t.Helper()
				for i := range dst {
					if i >= n {
						if math.Float32bits(dst[i]) != math.Float32bits(canary) {
							t.Fatalf("%s%s n=%d: wrote dst[%d] past n", k.name, form, n, i)
						}
						continue
					}
					want := k.op(x(i), y(i))
					if !sameArith(dst[i], want, x(i), y(i)) {
						t.Fatalf("%s%s n=%d: dst[%d] = %#x (%g), want %#x (%g) from %#x, %#x",
							k.name, form, n, i, math.Float32bits(dst[i]), dst[i], math.Float32bits(want), want,
							math.Float32bits(x(i)), math.Float32bits(y(i)))
					}
				}
			}
			av := func(i int) float32 { return a[i] }
			bv := func(i int) float32 { return b[i] }
			sc := func(int) float32 { return s }
			fresh := func() []float32 {
				d := make([]float32, n+guard)
				for i := range d {
					d[i] = canary
				}
				return d
			}
			d := fresh()
			k.vv(&d[0], &a[0], &b[0], n)
			check("VV", d, av, bv)
			d = fresh()
			k.vs(&d[0], &a[0], s, n)
			check("VS", d, av, sc)
			d = fresh()
			if k.sv != nil {
				k.sv(&d[0], s, &b[0], n)
			} else {
				k.vs(&d[0], &b[0], s, n)
			}
			check("SV", d, sc, bv)

			// In place: dst is a (vv, vs) or b (vv, sv).
			in := append(append([]float32{}, a[:n]...), canaryRun(guard, canary)...)
			k.vv(&in[0], &in[0], &b[0], n)
			check("VV in place of a", in, av, bv)
			in = append(append([]float32{}, b[:n]...), canaryRun(guard, canary)...)
			k.vv(&in[0], &a[0], &in[0], n)
			check("VV in place of b", in, av, bv)
			in = append(append([]float32{}, a[:n]...), canaryRun(guard, canary)...)
			k.vs(&in[0], &in[0], s, n)
			check("VS in place", in, av, sc)
			if k.sv != nil {
				in = append(append([]float32{}, b[:n]...), canaryRun(guard, canary)...)
				k.sv(&in[0], s, &in[0], n)
				check("SV in place", in, sc, bv)
			}
		}
	}
}

// canaryRun returns n copies of c.
func canaryRun(n int, c float32) []float32 {
	r := make([]float32, n)
	for i := range r {
		r[i] = c
	}
	return r
}

// TestAddRow32 checks AddRow32 against Go's scalar addition, bit for bit,
// for 0 to 9 rows, out of place and in place, and that it writes nothing
// past its rows.
func TestAddRow32(t *testing.T) {
	if !AVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewSource(2))
	canary := math.Float32frombits(0x7fc0beef)
	for rows := 0; rows <= 9; rows++ {
		for _, inPlace := range []bool{false, true} {
			src := arithValues(rng, 32*rows+1)
			row := arithValues(rng, 32)
			dst := make([]float32, 32*rows+1)
			for i := range dst {
				dst[i] = canary
			}
			if inPlace {
				copy(dst, src[:32*rows])
			}
			from := &dst[0]
			if !inPlace {
				from = &src[0]
			}
			AddRow32(&dst[0], from, &row[0], rows)
			for i := 0; i < 32*rows; i++ {
				if want := src[i] + row[i%32]; !sameArith(dst[i], want, src[i], row[i%32]) {
					t.Fatalf("rows %d in place %v: dst[%d] = %v (%#x), want %v + %v = %v", rows, inPlace, i, dst[i], math.Float32bits(dst[i]), src[i], row[i%32], want)
				}
			}
			if math.Float32bits(dst[32*rows]) != math.Float32bits(canary) {
				t.Fatalf("rows %d: wrote past the last row", rows)
			}
		}
	}
}
