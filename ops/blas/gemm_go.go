package blas

import (
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Blocking of the pure-Go GEMM (see the package doc). A packed B block is
// kcBlock×ncBlock (2 MiB, meant for L3 or a large L2); a packed A block is at
// most mcBlock×kcBlock (96 KiB, L2); the micro-kernel walks an mr×kcBlock
// sliver of A against a kcBlock×nr sliver of B (L1) keeping its mr×nr tile of
// C in registers.
const (
	mr      = kernel.MR
	nr      = kernel.NR
	kcBlock = 256
	mcBlock = 96 // multiple of mr
	ncBlock = 2048
	// smallWork is the m*n*k under which a call runs on one goroutine.
	smallWork = 64 * 64 * 64
)

// bufPool recycles packing buffers between calls (a cache, not state: any
// buffer it hands out is overwritten before use).
var bufPool = sync.Pool{New: func() any { return new([]float32) }}

func getBuf(n int) *[]float32 {
	p := bufPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// sgemmGo is the pure-Go Sgemm. useAsm selects the assembly micro-kernel
// (only honoured where kernel.Available); nthreads bounds the goroutines used.
func sgemmGo(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, nthreads int, useAsm bool) {
	if m == 0 || n == 0 {
		return
	}
	if alpha == 0 || k == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	// With beta 0 the first k block stores into C instead of adding (no
	// separate clearing pass, and first touches of fresh memory spread over
	// the workers); otherwise C is scaled first and every block adds.
	if beta != 0 {
		scaleC(m, n, beta, c, ldc)
	}
	useAsm = useAsm && kernel.Available
	if m*n*k <= smallWork {
		nthreads = 1
	}
	nthreads = max(1, nthreads)

	ncEff := min(n, ncBlock)
	nPanelsMax := (ncEff + nr - 1) / nr
	kcEff := min(k, kcBlock)
	bbuf := getBuf(nPanelsMax * nr * kcEff)
	defer bufPool.Put(bbuf)
	bp := *bbuf

	// Row block size: small enough that every thread gets a block.
	mc := mcBlock
	if per := (m + nthreads - 1) / nthreads; per < mc {
		mc = max(mr, (per+mr-1)/mr*mr)
	}
	nMB := (m + mc - 1) / mc

	for j0 := 0; j0 < n; j0 += ncBlock {
		nb := min(ncBlock, n-j0)
		nPanels := (nb + nr - 1) / nr
		// Split the column panels into groups when there are fewer row
		// blocks than threads (a short, wide C).
		nJG := 1
		if nMB < nthreads {
			nJG = min(nPanels, (nthreads+nMB-1)/nMB)
		}
		for p0 := 0; p0 < k; p0 += kcBlock {
			kb := min(kcBlock, k-p0)
			add := beta != 0 || p0 > 0
			items := nMB * nJG
			workers := min(nthreads, items)
			if workers <= 1 {
				packB(transB, b, ldb, p0, kb, j0, nb, bp, 0, nPanels)
				abuf := getBuf(mc * kb)
				for it := 0; it < items; it++ {
					runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0, transA, alpha, a, lda, bp, *abuf, c, ldc, add, useAsm)
				}
				bufPool.Put(abuf)
				continue
			}
			var wg sync.WaitGroup
			// Pack B cooperatively, then share it read-only.
			for w := 0; w < workers; w++ {
				lo, hi := w*nPanels/workers, (w+1)*nPanels/workers
				wg.Add(1)
				go func() {
					defer wg.Done()
					packB(transB, b, ldb, p0, kb, j0, nb, bp, lo, hi)
				}()
			}
			wg.Wait()
			var next atomic.Int64
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					abuf := getBuf(mc * kb)
					defer bufPool.Put(abuf)
					for {
						it := int(next.Add(1) - 1)
						if it >= items {
							return
						}
						runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0, transA, alpha, a, lda, bp, *abuf, c, ldc, add, useAsm)
					}
				}()
			}
			wg.Wait()
		}
	}
}

// runItem computes work item it: one row block of mc rows against one group
// of column panels of the packed B block, for the k slice [p0, p0+kb).
func runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0 int, transA bool, alpha float32, a []float32, lda int, bp, ap []float32, c []float32, ldc int, add, useAsm bool) {
	ib, jg := it/nJG, it%nJG
	i0 := ib * mc
	mb := min(mc, m-i0)
	jlo, jhi := jg*nPanels/nJG, (jg+1)*nPanels/nJG
	packA(transA, alpha, a, lda, i0, mb, p0, kb, ap)
	var tile [mr * nr]float32
	for jp := jlo; jp < jhi; jp++ {
		jc := jp * nr
		cols := min(nr, nb-jc)
		bs := bp[jp*nr*kb : (jp+1)*nr*kb]
		for ip := 0; ip*mr < mb; ip++ {
			rows := min(mr, mb-ip*mr)
			as := ap[ip*mr*kb : (ip+1)*mr*kb]
			coff := (i0+ip*mr)*ldc + j0 + jc
			if rows == mr && cols == nr {
				if useAsm {
					kernel.Sgemm6x16(kb, &as[0], &bs[0], &c[coff], ldc, add)
				} else {
					kernelGo(kb, as, bs, c[coff:], ldc, add)
				}
				continue
			}
			// Edge tile: compute the full padded tile, then add or store
			// the valid part.
			if useAsm {
				kernel.Sgemm6x16(kb, &as[0], &bs[0], &tile[0], nr, false)
			} else {
				kernelGo(kb, as, bs, tile[:], nr, false)
			}
			for r := 0; r < rows; r++ {
				crow := c[coff+r*ldc : coff+r*ldc+cols]
				trow := tile[r*nr : r*nr+cols]
				if !add {
					copy(crow, trow)
					continue
				}
				for j := range crow {
					crow[j] += trow[j]
				}
			}
		}
	}
}

// packA stores alpha*op(A)[i0:i0+mb, p0:p0+kb] as slivers of mr rows, each
// kb×mr column-interleaved, zero-padding the last sliver.
func packA(trans bool, alpha float32, a []float32, lda, i0, mb, p0, kb int, dst []float32) {
	for ip := 0; ip*mr < mb; ip++ {
		d := dst[ip*mr*kb : (ip+1)*mr*kb]
		rows := min(mr, mb-ip*mr)
		ib := i0 + ip*mr
		if rows < mr {
			clear(d)
		}
		if !trans {
			for r := 0; r < rows; r++ {
				src := a[(ib+r)*lda+p0 : (ib+r)*lda+p0+kb]
				for p, v := range src {
					d[p*mr+r] = alpha * v
				}
			}
			continue
		}
		for p := 0; p < kb; p++ {
			src := a[(p0+p)*lda+ib : (p0+p)*lda+ib+rows]
			dd := d[p*mr : p*mr+rows]
			for r, v := range src {
				dd[r] = alpha * v
			}
		}
	}
}

// packB stores column panels [plo, phi) of op(B)[p0:p0+kb, j0:j0+nb] as
// slivers of nr columns, each kb×nr row-major, zero-padding the last one.
func packB(trans bool, b []float32, ldb, p0, kb, j0, nb int, dst []float32, plo, phi int) {
	for jp := plo; jp < phi; jp++ {
		d := dst[jp*nr*kb : (jp+1)*nr*kb]
		jb := j0 + jp*nr
		cols := min(nr, j0+nb-jb)
		if cols < nr {
			clear(d)
		}
		if !trans {
			for p := 0; p < kb; p++ {
				copy(d[p*nr:p*nr+cols], b[(p0+p)*ldb+jb:(p0+p)*ldb+jb+cols])
			}
			continue
		}
		for cidx := 0; cidx < cols; cidx++ {
			src := b[(jb+cidx)*ldb+p0 : (jb+cidx)*ldb+p0+kb]
			for p, v := range src {
				d[p*nr+cidx] = v
			}
		}
	}
}

// kernelGo is the portable micro-kernel: C[0:mr, 0:nr] (row stride ldc) +=
// (or, when add is false, =) the product of an mr×k packed sliver of A and a
// k×nr packed sliver of B.
func kernelGo(k int, a, b, c []float32, ldc int, add bool) {
	var acc [mr * nr]float32
	for p := 0; p < k; p++ {
		bp := b[p*nr : p*nr+nr : p*nr+nr]
		ap := a[p*mr : p*mr+mr : p*mr+mr]
		for r, av := range ap {
			row := acc[r*nr : r*nr+nr : r*nr+nr]
			for j, bv := range bp {
				row[j] += av * bv
			}
		}
	}
	for r := 0; r < mr; r++ {
		crow := c[r*ldc : r*ldc+nr]
		arow := acc[r*nr : r*nr+nr]
		if !add {
			copy(crow, arow)
			continue
		}
		for j := range crow {
			crow[j] += arow[j]
		}
	}
}
