// Command expfit makes the constants of the base-2 exponential of
// kernel.ScoresExp8x32Base2 (EXP2_TAB32 in ops/internal/kernel/attn_amd64.s):
// the 32-entry table 2^(j/32) rounded to float32, and the two coefficients
// of 2^r ≈ 1 + c1·r + c2·r² on |r| ≤ 1/64. It emulates the kernel's float32
// pipeline step by step (the clamp, the rounding to a multiple of 1/32 by
// adding 1.5·2^18, the exact r, the table, the fused multiply-adds and the
// scaling by 2^m) and searches the coefficients' last bits, starting from
// Taylor's ln 2 and ln²2/2, for the smallest worst error in ulp over
// arguments from -30 to 8. It prints the DATA lines and the error (1.714
// ulp for the constants in the kernel; Taylor's give 4.2).
//
//	go run ./tools/expfit
package main

import (
	"fmt"
	"math"
)

// magic is 1.5·2^18: x + magic rounds x to a multiple of 1/32.
const magic = 1.5 * (1 << 18)

// exp2 is the kernel's 2^x for x = score - shift, in float32 steps.
func exp2(tab *[32]float32, x, c1, c2 float32) float32 {
	x = max(x, -151)
	t := x + magic
	n := t - magic
	r := x - n
	tb := tab[math.Float32bits(t)&31]
	p := float32(math.FMA(float64(c2), float64(r), float64(c1)))
	y := float32(math.FMA(float64(p), float64(r*tb), float64(tb)))
	return float32(float64(y) * math.Exp2(math.Floor(float64(n))))
}

// worstULP is the largest error of exp2 in ulp of the exact result.
func worstULP(tab *[32]float32, c1, c2 float32) float64 {
	const steps = 4_000_000
	worst := 0.0
	for i := 0; i < steps; i++ {
		x := float32(-30 + 38*float64(i)/steps)
		want := math.Exp2(float64(x))
		w32 := float32(want)
		ulp := float64(math.Nextafter32(w32, float32(math.Inf(1))) - w32)
		worst = max(worst, math.Abs(float64(exp2(tab, x, c1, c2))-want)/ulp)
	}
	return worst
}

// step moves f by d units in the last place.
func step(f float32, d int) float32 {
	return math.Float32frombits(uint32(int32(math.Float32bits(f)) + int32(d)))
}

func main() {
	var tab [32]float32
	for j := range tab {
		tab[j] = float32(math.Exp2(float64(j) / 32))
	}
	c1, c2 := float32(math.Ln2), float32(math.Ln2*math.Ln2/2)
	best := worstULP(&tab, c1, c2)
	fmt.Printf("// Taylor: c1 %v c2 %v, %.3f ulp\n", c1, c2, best)
	for _, size := range []int{64, 16, 4, 1} {
		for improved := true; improved; {
			improved = false
			for _, d := range [][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}, {1, 1}, {-1, -1}, {1, -1}, {-1, 1}} {
				a, b := step(c1, d[0]*size), step(c2, d[1]*size)
				if e := worstULP(&tab, a, b); e < best {
					best, c1, c2, improved = e, a, b, true
				}
			}
		}
	}
	fmt.Printf("// searched: %.3f ulp\n", best)
	fmt.Printf("DATA attnk<>+60(SB)/4, $%#08x // c1 = %v\n", math.Float32bits(c1), c1)
	fmt.Printf("DATA attnk<>+64(SB)/4, $%#08x // c2 = %v\n", math.Float32bits(c2), c2)
	for j, v := range tab {
		fmt.Printf("DATA exptab32<>+%d(SB)/4, $%#08x\n", 4*j, math.Float32bits(v))
	}
}
