package plugins

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestCopyBytes checks that copies are exact, bit for bit, and write
// nothing outside the destination: copySplit at small sizes, odd lengths
// and unaligned starts with several threads (the splitting itself), and
// copyBytes at sizes around ParallelCopyBytes (where it starts splitting).
func TestCopyBytes(t *testing.T) {
	type tc struct {
		n, threads int
		split      bool // copySplit with threads as is; else copyBytes
	}
	var cases []tc
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 4095, 1<<20 + 7} {
		for _, threads := range []int{1, 2, 3, 16} {
			cases = append(cases, tc{n, threads, true})
		}
	}
	for _, n := range []int{ParallelCopyBytes - 1, ParallelCopyBytes, ParallelCopyBytes + 63} {
		for _, threads := range []int{0, 1, 2, 64} {
			cases = append(cases, tc{n, threads, false})
		}
	}
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	for _, c := range cases {
		for _, skew := range []int{0, 13} { // unaligned starts
			name := fmt.Sprintf("n=%d/threads=%d/split=%v/skew=%d", c.n, c.threads, c.split, skew)
			src := make([]byte, c.n+skew)
			_, _ = rng.Read(src)
			src = src[skew:]
			dst := bytes.Repeat([]byte{0xAB}, c.n+2*skew+8)
			var got int
			if c.split {
				got = copySplit(dst[skew:skew+c.n], src, c.threads)
			} else {
				got = copyBytes(dst[skew:skew+c.n], src, c.threads)
			}
			if got != c.n {
				t.Fatalf("%s: copied %d bytes, want %d", name, got, c.n)
			}
			if !bytes.Equal(dst[skew:skew+c.n], src) {
				t.Fatalf("%s: the copy differs from the source", name)
			}
			if bytes.Count(dst[:skew], []byte{0xAB}) != skew || bytes.Count(dst[skew+c.n:], []byte{0xAB}) != skew+8 {
				t.Fatalf("%s: bytes outside the destination were written", name)
			}
		}
	}
	t.Run("shorter destination", func(t *testing.T) {
		src := bytes.Repeat([]byte{7}, 3<<20)
		dst := make([]byte, 2<<20+5)
		if got := copySplit(dst, src, 2); got != len(dst) || !bytes.Equal(dst, src[:len(dst)]) {
			t.Fatalf("copied %d bytes, want %d", got, len(dst))
		}
	})
}

// TestCopyThreads: one thread below ParallelCopyBytes or when asked for
// one; never more than the cores, nor than one per half threshold.
func TestCopyThreads(t *testing.T) {
	cores := min(runtime.GOMAXPROCS(0), runtime.NumCPU())
	cases := []struct{ n, threads, want int }{
		{ParallelCopyBytes - 1, 8, 1},
		{ParallelCopyBytes, 1, 1},
		{ParallelCopyBytes, 2, min(2, cores)},
		{ParallelCopyBytes, 0, min(2, cores)},
		{ParallelCopyBytes, 64, min(2, cores)},
		{100 * ParallelCopyBytes, 64, cores},
		{100 * ParallelCopyBytes, 0, cores},
	}
	for _, c := range cases {
		if got := copyThreads(c.n, c.threads); got != c.want {
			t.Errorf("copyThreads(%d, %d) = %d, want %d", c.n, c.threads, got, c.want)
		}
	}
}

// BenchmarkCopyBytes measures one and two threads copying tensors of
// sizes around ParallelCopyBytes, to place the threshold: hot (the same
// buffers every time: in cache up to the L3's size) and cold (rotating
// over 128 MiB of buffers, as a run's inputs and outputs are after the
// kernels between two copies). Destinations are faulted in, as a reused
// region or a bound output is.
func BenchmarkCopyBytes(b *testing.B) {
	for _, n := range []int{64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 6 << 20, 24 << 20, 64 << 20} {
		for _, cold := range []bool{false, true} {
			pairs := 1
			if cold {
				pairs = max(1, (128<<20)/(2*n))
			}
			src, dst := make([][]byte, pairs), make([][]byte, pairs)
			for i := range pairs {
				src[i], dst[i] = make([]byte, n), make([]byte, n)
				copy(dst[i], src[i])
			}
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%dKiB/cold=%v/threads=%d", n>>10, cold, threads), func(b *testing.B) {
					b.SetBytes(int64(n))
					for i := range b.N {
						copySplit(dst[i%pairs], src[i%pairs], threads)
					}
				})
			}
		}
	}
}
