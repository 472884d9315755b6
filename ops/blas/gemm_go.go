package blas

import (
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

// Blocking of the pure-Go GEMM (see the package doc). A packed B block is
// kcBlock×ncBlock (up to 12 MiB, meant for L3); a packed A block is at most
// mcBlock×kcBlock (288 KiB, L2); the micro-kernel walks an mr×kcBlock
// sliver of A against a kcBlock×nr sliver of B (L1/L2) keeping its mr×nr
// tile of C in registers. A deep kc means C is read and written once for
// most attention projections (K ≤ 768). Measured on a 2-core Zen 5 VM with
// the seed 000 shapes (2048×768 · 768×2304): kc 768 / nc 4096 is ~10%
// faster than 256 / 2048.
const (
	kcBlock = 768
	mcBlock = 96 // a multiple of every mr
	ncBlock = 4096
	// smallWork is the m*n*k under which a call runs on one goroutine.
	smallWork = 64 * 64 * 64
)

// The micro-kernel's tile: mr×nr = 8×32 with AVX-512, 6×16 with AVX2
// (and for the portable Go kernel elsewhere). They are fixed at program
// start from the CPU's features and never change afterwards.
var (
	mr, nr, asmKernel = tileFor(kernel.AVX512)
	biasKernel        = biasKernelFor(kernel.AVX512)
)

// biasKernelFor picks the micro-kernel that stores A·B + bias, where there
// is one (nil: the kernel stores, then Go adds the bias).
func biasKernelFor(avx512 bool) func(k int, a, b, c *float32, ldc int, bias *float32) {
	if avx512 {
		return kernel.Sgemm8x32Bias
	}
	return nil
}

// maxTile bounds mr·nr over the kernels, maxTileRows mr.
const (
	maxTile     = 8 * 32
	maxTileRows = 8
)

// tileFor picks the micro-kernel.
func tileFor(avx512 bool) (int, int, func(k int, a, b, c *float32, ldc int, add bool)) {
	if avx512 {
		return 8, 32, kernel.Sgemm8x32
	}
	return kernel.MR, kernel.NR, kernel.Sgemm6x16
}

// bufCache recycles packing buffers between calls. It is a cache, not
// state: a buffer it hands out is overwritten before use. Unlike a
// sync.Pool it survives garbage collections, so that a run does not fault
// in fresh packing memory after every GC (a page fault costs ~10 µs on
// some VMs, and a packed B block is 2 MiB).
var bufCache struct {
	mu   sync.Mutex
	free []*[]float32
}

// maxCachedBufs bounds the buffers bufCache keeps.
const maxCachedBufs = 16

// getBuf returns a buffer of n elements, reusing the smallest cached one
// that is large enough (or growing the largest).
func getBuf(n int) *[]float32 {
	bufCache.mu.Lock()
	best := -1
	for i, b := range bufCache.free {
		c := cap(*b)
		switch {
		case best < 0:
			best = i
		case c >= n && (cap(*bufCache.free[best]) < n || c < cap(*bufCache.free[best])):
			best = i
		case cap(*bufCache.free[best]) < n && c > cap(*bufCache.free[best]):
			best = i
		}
	}
	var p *[]float32
	if best >= 0 {
		p = bufCache.free[best]
		bufCache.free = append(bufCache.free[:best], bufCache.free[best+1:]...)
	}
	bufCache.mu.Unlock()
	if p == nil {
		p = new([]float32)
	}
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// putBuf returns a buffer to the cache.
func putBuf(p *[]float32) {
	bufCache.mu.Lock()
	if len(bufCache.free) < maxCachedBufs {
		bufCache.free = append(bufCache.free, p)
	}
	bufCache.mu.Unlock()
}

// sgemmGo is the pure-Go Sgemm. useAsm selects the assembly micro-kernel
// (only honoured where kernel.Available); nthreads bounds the goroutines used.
func sgemmGo(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, nthreads int, useAsm bool) {
	sgemmGoBias(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc, nthreads, useAsm, nil)
}

// sgemmGoBias is sgemmGo that, when bias (n elements) is given and beta
// is 0, computes C = alpha·op(A)·op(B) + bias (bias added to every row),
// adding the bias as the first k block's tiles are stored. With pb, B's
// blocks come packed already (b, ldb and transB are ignored).
func sgemmGoBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias, c []float32, ldc int, nthreads int, useAsm bool, pb *PackedB) {
	if m == 0 || n == 0 {
		return
	}
	if beta != 0 {
		bias = nil
	}
	if alpha == 0 || k == 0 {
		scaleC(m, n, beta, c, ldc)
		if bias != nil {
			for i := 0; i < m; i++ {
				copy(c[i*ldc:i*ldc+n], bias)
			}
		}
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

	var bp []float32
	if pb == nil {
		ncEff := min(n, ncBlock)
		nPanelsMax := (ncEff + nr - 1) / nr
		kcEff := min(k, kcBlock)
		bbuf := getBuf(nPanelsMax * nr * kcEff)
		defer putBuf(bbuf)
		bp = *bbuf
	}

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
			if pb != nil {
				bp = pb.block(j0, p0)
			}
			if workers <= 1 {
				if pb == nil {
					packB(transB, b, ldb, p0, kb, j0, nb, bp, 0, nPanels)
				}
				abuf := getBuf(mc*kb + maxTile)
				for it := 0; it < items; it++ {
					runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0, transA, alpha, a, lda, bp, *abuf, c, ldc, add, useAsm, bias)
				}
				putBuf(abuf)
				continue
			}
			// Pack B cooperatively, then share it read-only.
			if pb == nil {
				parallel.Run(workers, func(w int) {
					packB(transB, b, ldb, p0, kb, j0, nb, bp, w*nPanels/workers, (w+1)*nPanels/workers)
				})
			}
			var next atomic.Int64
			parallel.Run(workers, func(int) {
				abuf := getBuf(mc*kb + maxTile)
				defer putBuf(abuf)
				for {
					it := int(next.Add(1) - 1)
					if it >= items {
						return
					}
					runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0, transA, alpha, a, lda, bp, *abuf, c, ldc, add, useAsm, bias)
				}
			})
		}
	}
}

// runItem computes work item it: one row block of mc rows against one group
// of column panels of the packed B block, for the k slice [p0, p0+kb).
func runItem(it, nJG, nPanels, mc, m, nb, kb, p0, j0 int, transA bool, alpha float32, a []float32, lda int, bp, ap []float32, c []float32, ldc int, add, useAsm bool, bias []float32) {
	if add {
		bias = nil // added with the first k block
	}
	ib, jg := it/nJG, it%nJG
	i0 := ib * mc
	mb := min(mc, m-i0)
	jlo, jhi := jg*nPanels/nJG, (jg+1)*nPanels/nJG
	packA(transA, alpha, a, lda, i0, mb, p0, kb, ap)
	// The edge-tile buffer lives after the packed A block (a local array
	// would escape to the heap through the kernel function value).
	tile := ap[len(ap)-maxTile:]
	ap = ap[:len(ap)-maxTile]
	for jp := jlo; jp < jhi; jp++ {
		jc := jp * nr
		cols := min(nr, nb-jc)
		bs := bp[jp*nr*kb : (jp+1)*nr*kb]
		for ip := 0; ip*mr < mb; ip++ {
			rows := min(mr, mb-ip*mr)
			as := ap[ip*mr*kb : (ip+1)*mr*kb]
			coff := (i0+ip*mr)*ldc + j0 + jc
			if rows == mr && cols == nr {
				switch {
				case bias != nil && useAsm && biasKernel != nil:
					biasKernel(kb, &as[0], &bs[0], &c[coff], ldc, &bias[j0+jc])
				case useAsm:
					asmKernel(kb, &as[0], &bs[0], &c[coff], ldc, add)
				default:
					kernelGo(kb, as, bs, c[coff:], ldc, add)
				}
				if bias != nil && (!useAsm || biasKernel == nil) {
					bj := bias[j0+jc : j0+jc+nr]
					for r := 0; r < mr; r++ {
						crow := c[coff+r*ldc : coff+r*ldc+nr]
						for j, v := range bj {
							crow[j] += v
						}
					}
				}
				continue
			}
			// Edge tile: compute the full padded tile, then add or store
			// the valid part.
			if useAsm {
				asmKernel(kb, &as[0], &bs[0], &tile[0], nr, false)
			} else {
				kernelGo(kb, as, bs, tile, nr, false)
			}
			for r := 0; r < rows; r++ {
				crow := c[coff+r*ldc : coff+r*ldc+cols]
				trow := tile[r*nr : r*nr+cols]
				switch {
				case bias != nil:
					bj := bias[j0+jc : j0+jc+cols]
					for j := range crow {
						crow[j] = trow[j] + bj[j]
					}
				case !add:
					copy(crow, trow)
				default:
					for j := range crow {
						crow[j] += trow[j]
					}
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
			// Column by column of the sliver, so that writes are
			// sequential; the mr source rows stay in L1.
			var rowsA [maxTileRows][]float32
			for r := 0; r < rows; r++ {
				rowsA[r] = a[(ib+r)*lda+p0 : (ib+r)*lda+p0+kb]
			}
			if rows == mr && alpha == 1 {
				for p := 0; p < kb; p++ {
					dd := d[p*mr : p*mr+mr]
					for r := range dd {
						dd[r] = rowsA[r][p]
					}
				}
				continue
			}
			for p := 0; p < kb; p++ {
				dd := d[p*mr : p*mr+rows]
				for r := range dd {
					dd[r] = alpha * rowsA[r][p]
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

// PackedB is a k×n right-hand operand packed once into the blocks the GEMM
// reads (kcBlock×ncBlock blocks of nr-column slivers), for an operand that
// does not change between calls: a layer's weights. Packing costs about as
// much as a GEMM with a hundred rows, so a short sequence spent a fifth of
// its projections repacking them every run.
type PackedB struct {
	k, n   int
	nK     int         // k blocks per column block
	blocks [][]float32 // block (j0/ncBlock)*nK + p0/kcBlock
}

// PackB packs op(B) (k×n, row stride ldb) for SgemmPacked.
func PackB(transB bool, k, n int, b []float32, ldb int) *PackedB {
	checkGemm("PackB", false, transB, 1, n, k, k, max(k, 1), len(b), ldb, n, max(n, 1))
	pb := &PackedB{k: k, n: n, nK: (k + kcBlock - 1) / kcBlock}
	for j0 := 0; j0 < n; j0 += ncBlock {
		nb := min(ncBlock, n-j0)
		nPanels := (nb + nr - 1) / nr
		for p0 := 0; p0 < k; p0 += kcBlock {
			kb := min(kcBlock, k-p0)
			blk := make([]float32, nPanels*nr*kb)
			packB(transB, b, ldb, p0, kb, j0, nb, blk, 0, nPanels)
			pb.blocks = append(pb.blocks, blk)
		}
	}
	return pb
}

// Dims returns the packed operand's k and n.
func (pb *PackedB) Dims() (k, n int) { return pb.k, pb.n }

// Bytes is the memory the packed blocks hold.
func (pb *PackedB) Bytes() int64 {
	var n int64
	for _, b := range pb.blocks {
		n += 4 * int64(len(b))
	}
	return n
}

// block returns the packed block starting at row p0, column j0 of op(B).
func (pb *PackedB) block(j0, p0 int) []float32 {
	return pb.blocks[(j0/ncBlock)*pb.nK+p0/kcBlock]
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
	var acc [maxTile]float32
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
