package kernel_test

import (
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"golang.org/x/sys/unix"
)

// TestUnaryKernelTails runs the 16-lane unary kernels that take any length
// (Sigmoid16, Silu16, Tanh16, GeluTanh16, SinCos16) on every length 0..40 with src
// and dst ending right before an inaccessible page (a read or write past n
// faults), in place and not, and checks each element bit for bit against
// the same kernel on a 16-padded copy (so the partial vector gets the
// arithmetic of a whole one).
func TestUnaryKernelTails(t *testing.T) {
	if !kernel.AVX512 {
		t.Skip("no AVX-512")
	}
	kernels := []struct {
		name string
		k    func(dst, src *float32, n int)
	}{
		{"Sigmoid16", kernel.Sigmoid16},
		{"Silu16", kernel.Silu16},
		{"Tanh16", kernel.Tanh16},
		{"GeluTanh16", kernel.GeluTanh16},
		{"Sin", func(d, s *float32, n int) { kernel.SinCos16(d, s, n, false) }},
		{"Cos", func(d, s *float32, n int) { kernel.SinCos16(d, s, n, true) }},
	}
	page := unix.Getpagesize()
	guarded := func() []float32 {
		mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Munmap(mem) })
		if err := unix.Mprotect(mem[page:], unix.PROT_NONE); err != nil {
			t.Fatal(err)
		}
		return unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), page/4)
	}
	srcMem, dstMem := guarded(), guarded()
	r := rand.New(rand.NewSource(3))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 0.625, -9, 88}
	for _, kc := range kernels {
		for n := 0; n <= 40; n++ {
			for _, inPlace := range []bool{false, true} {
				src := srcMem[len(srcMem)-n:]
				for i := range src {
					src[i] = float32(r.NormFloat64() * 4)
				}
				copy(src, special[:min(n, len(special))])
				// The reference: the kernel on whole vectors of a padded copy.
				padded := make([]float32, (n+15)/16*16+16)
				copy(padded, src)
				want := make([]float32, len(padded))
				kc.k(&want[0], &padded[0], len(padded))
				dst := dstMem[len(dstMem)-n:]
				if inPlace {
					dst = src
				}
				if n > 0 {
					kc.k(&dst[0], &src[0], n)
				}
				for i := 0; i < n; i++ {
					if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s n=%d inPlace=%v: element %d = %v, want %v (the padded copy's)", kc.name, n, inPlace, i, dst[i], want[i])
					}
				}
			}
		}
	}
}
