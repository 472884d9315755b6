package blas

import (
	"sync"
	"sync/atomic"

	"github.com/attnrun/attnrun/internal/hugepages"
	"github.com/attnrun/attnrun/ops/internal/kernel"
	"github.com/attnrun/attnrun/ops/internal/parallel"
)

// Blocking of the pure-Go GEMM (see the package doc). A B block packed per
// call is kcBlock×ncBlock (up to 12 MiB, meant for L3); weights packed once
// (PackedB) take k in deeper blocks (packedKC, up to packedKCMax); a packed
// A block is at most mcBlock×kc (768 KiB at kcBlock, L2) and A's rows are
// read in place where they can be; the micro-kernel walks an mr×kc sliver
// of A against a kc×nr sliver of B (L1/L2) keeping its mr×nr tile of C in
// registers. A deep kc means C is read and written once for most attention
// projections (K ≤ 768). Measured on a 2-core Zen 5 VM with the seed 000
// shapes (2048×768 · 768×2304): kc 768 / nc 4096 is ~10% faster than 256 /
// 2048.
const (
	kcBlock = 768
	mcBlock = 256 // a multiple of every mr
	ncBlock = 4096
	// epiPanels is how many column panels of a row block the epilogue
	// finishes at a time (an epilogue chunk, blockItems.finishPanel): 256
	// columns of up to mcBlock rows, 256 KiB, still in L2 when it runs.
	epiPanels = 8
	// smallWork is the m*n*k under which a call runs on one goroutine.
	smallWork = 64 * 64 * 64
)

// Epilogue finishes a block of C, rows [i0, i0+rows) and columns [j0,
// j0+cols), once its product (and bias) is final, while the block is still
// in cache: FusedMatMul's activation, gate multiply and residual add
// (package ops). The GEMM calls it once for every element of C, on its
// worker goroutines, concurrently for disjoint blocks; it must only touch
// its block.
type Epilogue func(i0, rows, j0, cols int)

// The micro-kernel's tile: mr×nr = 8×32 with AVX-512, 6×16 with AVX2
// (and for the portable Go kernel elsewhere). They are fixed at program
// start from the CPU's features and never change afterwards.
var (
	mr, nr, asmKernel = tileFor(kernel.AVX512)
	rowKernel         = rowKernelFor(kernel.AVX512)
)

// rowKernelFor picks the micro-kernel that reads A's rows in place
// (nil: A is packed in interleaved slivers for asmKernel).
func rowKernelFor(avx512 bool) func(k int, a *float32, lda int, b, c *float32, ldc int, bias *float32, add bool, pf *float32, pfLines int) {
	if avx512 {
		return kernel.Sgemm8x32Rows
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
// some VMs, and a packed B block is 2 MiB). Its buffers, and packed
// weights' blocks (packWhole), of 2 MiB or more lie in huge pages
// (hugepages.Floats).
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
		*p = hugepages.Floats(n)
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
	gemmGo(newFP32Tiles(useAsm), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, nil, c, ldc, nthreads, nil, 0, nil)
}

// tileOps is what a precision of the GEMM brings to the blocked loops of
// gemmGo: how it packs blocks of A and B and how it computes a tile. The
// fp32 GEMM (fp32Tiles) packs float32s; the bf16 GEMM (bf16Tiles, see
// bf16.go) rounds both operands to bf16 pairs in its packing and keeps
// them, one 32-bit word per pair, in the same []float32 buffers.
type tileOps interface {
	// aLen and bLen are the buffer lengths of a packed A block of mc rows
	// of alpha·op(A) (only the rows packA does not read in place) and of
	// nPanels packed B panels, over kb of k.
	aLen(trans bool, alpha float32, mc, kb int) int
	bLen(nPanels, kb int) int
	// packA readies alpha·op(A)[i0:i0+mb, p0:p0+kb] for tile, packing
	// into buf (aLen(trans, alpha, mb, kb)) what it does not read in place.
	packA(trans bool, alpha float32, a []float32, lda, i0, mb, p0, kb int, buf []float32) aBlock
	// packB packs column panels [plo, phi) of op(B)[p0:p0+kb, j0:j0+nb]
	// into dst (bLen of the block's panels), zero-padding the last one.
	packB(trans bool, b []float32, ldb, p0, kb, j0, nb int, dst []float32, plo, phi int)
	// tile computes the mr×nr tile of row sliver ip of the A block ab and
	// the packed B panel bp into c (row stride ldc): it stores the product,
	// adds it (add), or stores it plus bias (nr elements; bias is only
	// given when add is false). A kernel that can prefetches pf (the next
	// panel's share of this tile, whole cache lines; nil for none) into L2
	// as it goes.
	tile(kb int, ab aBlock, ip int, bp []float32, c []float32, ldc int, add bool, bias, pf []float32)
}

// aBlock is a block of A as packA readied it: row slivers ip < inPlace
// are read in place, sliver ip starting at src[off + ip·mr·ld] with rows
// ld apart; the others are in buf, from sliver inPlace on: row-major
// with rows bufLd apart, or interleaved (bufLd 0: element (r, p) of a
// sliver at p·mr + r).
type aBlock struct {
	src     []float32
	off, ld int
	inPlace int
	buf     []float32
	bufLd   int
}

// sliver returns the start of row sliver ip and its row stride (0 for an
// interleaved sliver of kb columns).
func (ab *aBlock) sliver(ip, kb int) ([]float32, int) {
	if ip < ab.inPlace {
		return ab.src[ab.off+ip*mr*ab.ld:], ab.ld
	}
	ip -= ab.inPlace
	if ab.bufLd == 0 {
		return ab.buf[ip*mr*kb : (ip+1)*mr*kb], 0
	}
	return ab.buf[ip*mr*ab.bufLd:], ab.bufLd
}

// gemmGo computes C = alpha·op(A)·op(B) + beta·C with the precision's
// tiles, and, when bias (n elements) is given and beta is 0, C =
// alpha·op(A)·op(B) + bias (bias added to every row, as the first k
// block's tiles are stored). With pb, B's blocks come packed already in
// the precision's layout (b, ldb and transB are ignored).
func gemmGo(ops tileOps, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, bias, c []float32, ldc int, nthreads int, pb *PackedB, stripe int, epi Epilogue) {
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
		if epi != nil {
			epi(0, m, 0, n)
		}
		return
	}
	// With beta 0 the first k block stores into C instead of adding (no
	// separate clearing pass, and first touches of fresh memory spread over
	// the workers); otherwise C is scaled first and every block adds.
	if beta != 0 {
		scaleC(m, n, beta, c, ldc)
	}
	if m*n*k <= smallWork {
		nthreads = 1
	}
	nthreads = max(1, nthreads)

	// B's k blocks: kc rows deep, packed per call into bp (one block at a
	// time) or packed once already (pb).
	var bp []float32
	kc := kcBlock
	if pb != nil {
		kc = pb.kc
	} else {
		ncEff := min(n, ncBlock)
		nPanelsMax := (ncEff + nr - 1) / nr
		bbuf := getBuf(ops.bLen(nPanelsMax, min(k, kcBlock)))
		defer putBuf(bbuf)
		bp = *bbuf
	}

	mc := rowBlock(m, nthreads)
	if pb != nil {
		// Packed weights are split by columns, not rows (below): each
		// work item takes up to mcBlock rows.
		mc = min(mcBlock, (m+mr-1)/mr*mr)
	}
	nMB := (m + mc - 1) / mc

	for j0 := 0; j0 < n; j0 += ncBlock {
		nb := min(ncBlock, n-j0)
		nPanels := (nb + nr - 1) / nr
		// Split the column panels into groups when there are fewer row
		// blocks than threads (a short, wide C), and always for packed
		// weights: a model's weights mostly come from memory, not cache
		// (a 12-layer encoder cycles through 340 MB of them), and split
		// by columns each thread streams only its share of B, reusing
		// each panel over all its rows, instead of both threads streaming
		// all of B for half the rows. Measured on 2 cores (Zen 5) at
		// M=128, K=768, N=3072 cycling through 24 packed weights: 428–447
		// → 471–478 GFLOP/s; with one weight hot in cache 474–518 →
		// 500–525; at M=8 and M=2048 no difference.
		nJG := 1
		if pb != nil {
			nJG = min(nPanels, nthreads)
		} else if nMB < nthreads {
			nJG = min(nPanels, (nthreads+nMB-1)/nMB)
		}
		stripePanels := 0 // column groups take a share of every stripe (SgemmPackedStriped)
		if stripedGroups(stripe, n, nJG) {
			stripePanels = stripe / nr
		}
		runs := groupRuns(nJG, nPanels, stripePanels) // the same for every k block
		var chunkOf []int
		var chunks [][2]int
		if epi != nil {
			chunkOf, chunks = epiChunks(runs, nPanels)
		}
		for p0 := 0; p0 < k; p0 += kc {
			kb := min(kc, k-p0)
			it := blockItems{ops: ops, nJG: nJG, nPanels: nPanels, mc: mc, m: m, nb: nb, kb: kb, p0: p0, j0: j0,
				transA: transA, alpha: alpha, a: a, lda: lda, c: c, ldc: ldc, add: beta != 0 || p0 > 0, bias: bias,
				groupRuns: runs}
			if p0+kb == k && epi != nil {
				it.epi = epi // the last k block: the items' C blocks are final
				it.chunkOf, it.chunks, it.epiLeft = chunkOf, chunks, newEpiLeft(nMB, chunks)
			}
			items := nMB * nJG
			workers := min(nthreads, items)
			if pb != nil {
				bp = pb.block(j0, p0)
			}
			it.bp = bp
			// Pack B (cooperatively), then share it read-only.
			if pb == nil {
				parallel.Run(workers, func(w int) {
					ops.packB(transB, b, ldb, p0, kb, j0, nb, bp, w*nPanels/workers, (w+1)*nPanels/workers)
				})
			}
			// Worker w takes the units of column group w (mod nJG) from
			// the front, then helps with the other groups' from their back
			// (parallel.RunGroups): the same worker computes the same
			// columns in every call and k block, so that the worker that
			// reads a group's columns next (an attention head's Q, K and
			// V: SgemmPackedStriped) mostly finds them in its own cache,
			// and a worker that ends early (the two vCPUs of a shared VM
			// do not run at one speed) takes over the other's last units.
			abufs := make([]*[]float32, workers)
			for w := range abufs {
				abufs[w] = getBuf(ops.aLen(transA, alpha, mc, kb) + maxTile)
			}
			parallel.RunGroups(workers, nJG, it.units, func(w int) func(jg, u, next int) {
				ws := unitWorker{buf: *abufs[w], ib: -1}
				return func(jg, u, next int) { it.runUnit(&ws, jg, u, next) }
			})
			for _, abuf := range abufs {
				putBuf(abuf)
			}
		}
	}
}

// stripedGroups reports whether the column groups of a GEMM with n
// columns split into nJG groups can each take an equal run of panels from
// every stripe of stripe columns: n a multiple of stripe, stripe of nJG·nr
// (whole panels per share), and every column block a whole number of
// stripes.
func stripedGroups(stripe, n, nJG int) bool {
	return stripe > 0 && nJG > 1 && n > stripe && n%stripe == 0 && stripe%(nJG*nr) == 0 && (n <= ncBlock || ncBlock%stripe == 0)
}

// rowBlock returns the rows of C per work item for m rows on nthreads
// threads: at most mcBlock, a multiple of mr, and as even a split as
// that allows, with a multiple of nthreads blocks (so that no thread idles
// while another finishes a last block).
func rowBlock(m, nthreads int) int {
	per := (m + nthreads - 1) / nthreads
	blocks := nthreads * ((per + mcBlock - 1) / mcBlock)
	mc := (m + blocks - 1) / blocks
	return max(mr, (mc+mr-1)/mr*mr)
}

// blockItems are the work items of one block of B (columns j0..j0+nb,
// k slice p0..p0+kb): each is a row block of mc rows against one of nJG
// groups of the block's column panels.
type blockItems struct {
	ops                                 tileOps
	nJG, nPanels, mc, m, nb, kb, p0, j0 int
	transA                              bool
	alpha                               float32
	a                                   []float32
	lda                                 int
	bp                                  []float32 // the packed B block
	c                                   []float32
	ldc                                 int
	add                                 bool       // add to C (a later k block, or beta ≠ 0)
	bias                                []float32  // added by the first k block
	epi                                 Epilogue   // run on each epilogue chunk of C (the last k block only)
	groupRuns                           [][][2]int // each column group's panel runs (groupRuns)

	// The epilogue's chunks (epiChunks; chunkOf and chunks) and, for row
	// block ib's chunk c at ib·len(chunks) + c, its panels not yet
	// computed (finishPanel).
	chunkOf []int
	chunks  [][2]int
	epiLeft []atomic.Int32
}

// unitPanels is how many column panels a work unit takes where B's
// columns are split into groups (packed weights, short wide products):
// a unit is a row block against a run of at most unitPanels of its
// group's panels, so that a worker that ends its own group early can take
// over the other's last units. With a whole group a unit, as until
// 2026-11-28, the two workers of seed 000's QKV projection (512×768 ·
// 768×2304, two row blocks a group) ended up to 470 µs apart (p10 and p90
// of the difference of their end times: −472 and +422 µs over 300 calls,
// 2-core Zen 4 VM), one core idle meanwhile; with units of one panel
// −89 and +97 µs. Calls of the two schedules alternating in one process
// (300 each, two rounds): the same p10 and p50, p90 1–5% and the mean
// 0.1–2% lower, for 197 and 512 rows against 768 and 2304 columns.
const unitPanels = 1

// groupRuns returns the panel runs of each of nJG column groups of
// nPanels panels, in the order the group's owner computes them: one range
// of about nPanels/nJG panels, or with stripePanels the same share of
// every stripe. Where B's columns are split into groups each run is at
// most unitPanels long; with one group it is the whole range, and a unit
// a whole row block.
func groupRuns(nJG, nPanels, stripePanels int) [][][2]int {
	groups := make([][][2]int, nJG)
	for jg := range groups {
		lo, hi, step := jg*nPanels/nJG, (jg+1)*nPanels/nJG, nPanels
		if stripePanels > 0 {
			share := stripePanels / nJG
			lo, hi, step = jg*share, (jg+1)*share, stripePanels
		}
		per := hi - lo
		if nJG > 1 {
			per = unitPanels
		}
		for s := 0; lo+s < nPanels; s += step {
			for p := lo + s; p < hi+s; p += per {
				groups[jg] = append(groups[jg], [2]int{p, min(p+per, hi+s)})
			}
		}
	}
	return groups
}

// units returns how many units column group jg has: unit u is row block
// u / len(runs) against panel run u % len(runs), row block by row block,
// so that the group's owner reuses each row block's A over all of its
// panels.
func (b *blockItems) units(jg int) int {
	return (b.m + b.mc - 1) / b.mc * len(b.groupRuns[jg])
}

// unitWorker is a worker's state across units: buf (aLen(transA, alpha,
// mc, kb) + maxTile floats) holds row block ib's A as packed in ab, and
// an edge tile.
type unitWorker struct {
	buf []float32
	ib  int
	ab  aBlock
}

// runUnit computes unit u of column group jg; the unit's last panel
// prefetches the first of unit next, the one the worker takes next (none
// when next < 0).
func (b *blockItems) runUnit(ws *unitWorker, jg, u, next int) {
	runs := b.groupRuns[jg]
	ib, run := u/len(runs), runs[u%len(runs)]
	i0 := ib * b.mc
	mb := min(b.mc, b.m-i0)
	if ws.ib != ib {
		ws.ab = b.ops.packA(b.transA, b.alpha, b.a, b.lda, i0, mb, b.p0, b.kb, ws.buf[:b.ops.aLen(b.transA, b.alpha, mb, b.kb)])
		ws.ib = ib
	}
	after := -1
	if next >= 0 {
		after = runs[next%len(runs)][0]
	}
	b.panels(ws.ab, i0, mb, run[0], run[1], after, ws.buf[len(ws.buf)-maxTile:])
}

// panels computes rows [i0, i0+mb) (A packed in ab) against column panels
// [jlo, jhi); the last of them prefetches panel after (none when < 0);
// tile is scratch for an edge tile.
func (b *blockItems) panels(ab aBlock, i0, mb, jlo, jhi, after int, tile []float32) {
	bias := b.bias
	if b.add {
		bias = nil // added with the first k block
	}
	panel := b.ops.bLen(1, b.kb)
	fullTiles := mb / mr // the tiles that prefetch (edge tiles do not)
	for jp := jlo; jp < jhi; jp++ {
		jc := jp * nr
		cols := min(nr, b.nb-jc)
		bs := b.bp[jp*panel : (jp+1)*panel]
		var bj []float32
		if bias != nil {
			bj = bias[b.j0+jc : b.j0+jc+cols]
		}
		// The next panel, its lines shared out over this panel's full
		// tiles for them to prefetch (nextPanelShare).
		var next []float32
		np := jp + 1
		if np == jhi {
			np = after
		}
		if np >= 0 && fullTiles > 0 {
			next = b.bp[np*panel : (np+1)*panel]
		}
		for ip := 0; ip*mr < mb; ip++ {
			rows := min(mr, mb-ip*mr)
			coff := (i0+ip*mr)*b.ldc + b.j0 + jc
			if rows == mr && cols == nr {
				b.ops.tile(b.kb, ab, ip, bs, b.c[coff:], b.ldc, b.add, bj, nextPanelShare(next, ip, fullTiles))
				continue
			}
			// Edge tile: compute the full padded tile, then add or store
			// the valid part.
			b.ops.tile(b.kb, ab, ip, bs, tile, nr, false, nil, nil)
			for r := range rows {
				crow := b.c[coff+r*b.ldc : coff+r*b.ldc+cols]
				trow := tile[r*nr : r*nr+cols]
				switch {
				case bj != nil:
					for j := range crow {
						crow[j] = trow[j] + bj[j]
					}
				case !b.add:
					copy(crow, trow)
				default:
					for j := range crow {
						crow[j] += trow[j]
					}
				}
			}
		}
		if b.epi != nil {
			b.finishPanel(i0, mb, jp)
		}
	}
}

// epiChunks splits the column panels of groupRuns' groups into epilogue
// chunks: each group's contiguous ranges of panels (one, or its share of
// every stripe) in runs of at most epiPanels from the range's start, so
// that a chunk lies in one share. chunkOf[jp] is panel jp's chunk, chunks
// each chunk's panel range.
func epiChunks(runs [][][2]int, nPanels int) (chunkOf []int, chunks [][2]int) {
	chunkOf = make([]int, nPanels)
	for _, group := range runs {
		for i := 0; i < len(group); {
			lo, hi := group[i][0], group[i][1]
			for i++; i < len(group) && group[i][0] == hi; i++ {
				hi = group[i][1]
			}
			for c := lo; c < hi; c += epiPanels {
				for jp := c; jp < min(c+epiPanels, hi); jp++ {
					chunkOf[jp] = len(chunks)
				}
				chunks = append(chunks, [2]int{c, min(c+epiPanels, hi)})
			}
		}
	}
	return chunkOf, chunks
}

// newEpiLeft returns blockItems.epiLeft for nMB row blocks: each chunk
// starts at its panel count.
func newEpiLeft(nMB int, chunks [][2]int) []atomic.Int32 {
	left := make([]atomic.Int32, nMB*len(chunks))
	for i := range left {
		c := chunks[i%len(chunks)]
		left[i].Store(int32(c[1] - c[0]))
	}
	return left
}

// finishPanel counts panel jp of the row block at i0 (mb rows) as
// computed and, when it was the last of its epilogue chunk, runs the
// epilogue on the chunk's columns. Units are one panel (unitPanels), and
// a chunk's panels may be computed by both workers (one takes over the
// other's last units): whichever computes its last panel finishes it, on
// columns still in the caches. An epilogue a unit ran on 32 columns of
// 256 rows 3 KiB apart, and waited on memory for a residual's every row:
// kernel.AddVV took 1.7% of the 12-layer encoder at S=512 in process,
// 0.7% with chunks (0.6% before units were one panel; `perf record`,
// 2-core Zen 4 VM, 2026-11-29).
func (b *blockItems) finishPanel(i0, mb, jp int) {
	c := b.chunkOf[jp]
	if b.epiLeft[i0/b.mc*len(b.chunks)+c].Add(-1) != 0 {
		return
	}
	lo, hi := b.chunks[c][0]*nr, min(b.chunks[c][1]*nr, b.nb)
	b.epi(i0, mb, b.j0+lo, hi-lo)
}

// firstOrNil returns &s[0], or nil for an empty s: the optional pointer
// arguments of the assembly kernels.
func firstOrNil(s []float32) *float32 {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// floatsPerLine is how many float32s a 64-byte cache line holds.
const floatsPerLine = 16

// nextPanelShare returns tile ip's share of next (of tiles tiles), the B
// panel the work item reads after this one, for the tile's kernel to
// prefetch into L2 while it computes: whole cache lines, the panel split
// evenly. A model whose weights do not fit in the caches (a 12-layer
// encoder cycles through 340 MB of them) otherwise waits on memory at the
// first tile of every panel: the kernel reads B four times faster than
// one core's share of the memory bandwidth, and the hardware prefetcher
// stops following the stream when the next tile goes back to the
// panel's start. Measured on a 2-core Zen 5 VM (SgemmPacked, 2 threads,
// with and without, interleaved, median of 8 per-round ratios,
// 2026-11-24 17:50-17:57 UTC), weights cycled through 12 or 24 matrices,
// fp32 (two runs) and bf16: 128×768·768×2304 1.09–1.11× and 1.15×,
// 128×768·768×3072 1.07–1.10× and 1.12×, 128×3072·3072×768 1.04–1.05×
// and 1.00×, 512×768·768×3072 1.04–1.05× and 1.08×, 512×3072·3072×768
// 1.01–1.02× and 1.04×; one weight, hot in cache, 1.00–1.01× and
// 1.00–1.02×. Issued in bursts before each tile instead, the prefetches
// made the same fp32 products up to 9% slower. The kernel spreads its
// share over its k/8 iterations, as many lines an iteration as that takes
// (up to 8); at one a iteration, as it was until 2026-11-28, a tile
// fetched at most k/8 lines, the whole panel only where 16 tiles share
// it (M ≥ 128), and shorter products waited on memory for the rest:
// BenchmarkSgemmPackedColdWeights on the 2-core Zen 4 VM (48 weights
// cycled, two builds alternating, best rounds, 2026-11-28 14:55 UTC) M=16
// 69–73% → 82–84% of the peak, M=40 80–82% → 92%, M=64 84–86% → 94–95%,
// M=77 79–85% → 87–92%, M=128 95–97% both.
func nextPanelShare(next []float32, ip, tiles int) []float32 {
	lines := len(next) / floatsPerLine
	per := (lines + tiles - 1) / tiles
	lo := min(ip*per, lines)
	return next[lo*floatsPerLine : min(lo+per, lines)*floatsPerLine]
}

// fp32Tiles is the fp32 GEMM's packing and micro-kernel. B is packed in
// panels of nr columns (kb×nr row-major). With rows (AVX-512), the
// kernel (kernel.Sgemm8x32Rows) reads A's rows in place where A is
// row-major with alpha 1 and packs it row-major otherwise; else A is
// packed in interleaved slivers for the asm kernel (asm: AVX2's 6×16) or
// kernelGo.
type fp32Tiles struct{ asm, rows bool }

// newFP32Tiles picks the fp32 kernels: assembly where asm is set and the
// CPU has it, row-reading on AVX-512.
func newFP32Tiles(asm bool) fp32Tiles {
	asm = asm && kernel.Available
	return fp32Tiles{asm: asm, rows: asm && rowKernel != nil}
}

// rowStride is the row stride of a row-major packed A block over kb of k:
// kb rounded up to a 64-byte line, and off multiples of 4 KiB (rows 4 KiB
// apart would share L1 sets).
func rowStride(kb int) int {
	ld := (kb + 15) / 16 * 16
	if ld%1024 == 0 {
		ld += 16
	}
	return ld
}

// readsInPlace reports whether the row kernel reads A's rows where they
// are (alpha·op(A) is A itself); packA then packs only a partial last
// sliver.
func (t fp32Tiles) readsInPlace(trans bool, alpha float32) bool {
	return t.rows && !trans && alpha == 1
}

func (t fp32Tiles) aLen(trans bool, alpha float32, mc, kb int) int {
	switch {
	case t.readsInPlace(trans, alpha): // rows in place but a partial last sliver
		return mr * rowStride(kb)
	case t.rows:
		return (mc + mr - 1) / mr * mr * rowStride(kb)
	}
	return (mc + mr - 1) / mr * mr * kb
}

func (fp32Tiles) bLen(nPanels, kb int) int { return nPanels * nr * kb }

func (t fp32Tiles) packA(trans bool, alpha float32, a []float32, lda, i0, mb, p0, kb int, buf []float32) aBlock {
	if !t.rows {
		packA(trans, alpha, a, lda, i0, mb, p0, kb, buf)
		return aBlock{buf: buf}
	}
	ab := aBlock{buf: buf, bufLd: rowStride(kb)}
	// Rows read in place may lie a multiple of 4 KiB apart (k = 1024,
	// 3072, 4096): a tile's 8 rows then stream through one L1 set at a
	// time, which has 12 ways, and copying them cost more. Measured on a
	// 2-core Zen 5 VM (SgemmPacked, 2 threads, k blocks of 768,
	// interleaved, 2026-11-24 about 17:40 UTC): k = 3072 and 4096 1–7%
	// faster in place, k = 1024 0–3%.
	if t.readsInPlace(trans, alpha) {
		ab.src, ab.off, ab.ld, ab.inPlace = a, i0*lda+p0, lda, mb/mr
	}
	first := ab.inPlace * mr
	for r := 0; r < (mb+mr-1)/mr*mr-first; r++ {
		row := buf[r*ab.bufLd : r*ab.bufLd+kb]
		i := i0 + first + r
		switch {
		case first+r >= mb:
			clear(row)
		case !trans:
			src := a[i*lda+p0 : i*lda+p0+kb]
			if alpha == 1 {
				copy(row, src)
				continue
			}
			for p, v := range src {
				row[p] = alpha * v
			}
		default:
			for p := range row {
				row[p] = alpha * a[(p0+p)*lda+i]
			}
		}
	}
	return ab
}

func (fp32Tiles) packB(trans bool, b []float32, ldb, p0, kb, j0, nb int, dst []float32, plo, phi int) {
	packB(trans, b, ldb, p0, kb, j0, nb, dst, plo, phi)
}

func (t fp32Tiles) tile(kb int, ab aBlock, ip int, bp []float32, c []float32, ldc int, add bool, bias, pf []float32) {
	as, ld := ab.sliver(ip, kb)
	if t.rows {
		_ = as[(mr-1)*ld+kb-1]
		_ = c[(mr-1)*ldc+nr-1]
		rowKernel(kb, &as[0], ld, &bp[0], &c[0], ldc, firstOrNil(bias), add, firstOrNil(pf), len(pf)/floatsPerLine)
		return
	}
	switch {
	case t.asm:
		asmKernel(kb, &as[0], &bp[0], &c[0], ldc, add)
	default:
		kernelGo(kb, as, bp, c, ldc, add)
	}
	if bias != nil {
		addBias(c, ldc, bias)
	}
}

// addBias adds bias (nr elements) to every row of an mr×nr tile.
func addBias(c []float32, ldc int, bias []float32) {
	for r := 0; r < mr; r++ {
		crow := c[r*ldc : r*ldc+nr]
		for j, v := range bias[:nr] {
			crow[j] += v
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
// reads (kc×ncBlock blocks of nr-column slivers, kc = packedKC(k)), for an operand that
// does not change between calls: a layer's weights. Packing costs about as
// much as a GEMM with a hundred rows, so a short sequence spent a fifth of
// its projections repacking them every run. PackB keeps fp32, PackBBF16
// rounds to bf16 (half the memory), and SgemmPacked multiplies in the
// packed operand's precision.
type PackedB struct {
	k, n   int
	bf16   bool
	kc     int         // rows of op(B) per k block (packedKC)
	nK     int         // k blocks per column block
	blocks [][]float32 // block (j0/ncBlock)*nK + p0/kc
}

// packedKCMax is the deepest k block of a packed operand. Packed weights
// take all of k in one block up to it (packedKC), deeper than the
// kcBlock of operands packed per call: every k block after the first
// reads and rewrites all of C, and the feed-forward layers' second
// product (k = 4·768) made four such passes. The A block of mcBlock rows
// then outgrows L2, but the fp32 kernel reads A's rows in place and
// streams them well; where A is packed instead (transposed, or rounded to
// bf16) a worker's A buffer grows with kc, to 3 MiB in fp32 and 1.5 MiB in
// bf16 at 3072. Measured on a 2-core Zen 5 VM (SgemmPacked, 2 threads, with
// A read in place at any stride, against blocks of 768 with rows 4 KiB
// apart packed; configurations interleaved, median of 8 per-round
// ratios; 2026-11-24 about 17:40 UTC), in fp32 and bf16: 512×3072·3072×768
// (a BERT-base FFN's second product, 12 weights cycled) 1.09× and 1.13×,
// at 128 rows 1.04× and 1.07×, at 2048 rows 1.16× and 1.22×;
// 512×1024·1024×3072 1.09× and 1.17×; 512×1536·1536×1536 1.05× and 1.07×;
// 512×4096·4096×1024 (two blocks of 2048) 1.06× and 1.12×; k = 768
// unchanged (1.00×). In the 12-layer encoder at S=512 the second FFN
// product went from 5.18 to 4.98 ms a layer (attnrun profile).
const packedKCMax = 3072

// packedKC returns the k block depth of a packed k×n operand: all of k up
// to packedKCMax, else k split into the fewest even blocks no deeper than
// that (rounded up to 16 rows).
func packedKC(k int) int {
	if k <= packedKCMax {
		return max(k, 1)
	}
	blocks := (k + packedKCMax - 1) / packedKCMax
	return ((k+blocks-1)/blocks + 15) / 16 * 16
}

// PackB packs op(B) (k×n, row stride ldb) for SgemmPacked.
func PackB(transB bool, k, n int, b []float32, ldb int) *PackedB {
	return packWhole("PackB", fp32Tiles{}, transB, k, n, b, ldb)
}

// packWhole packs all of op(B) in ops' layout.
func packWhole(name string, ops tileOps, transB bool, k, n int, b []float32, ldb int) *PackedB {
	checkGemm(name, false, transB, 1, n, k, k, max(k, 1), len(b), ldb, n, max(n, 1))
	_, bf16 := ops.(bf16Tiles)
	kc := packedKC(k)
	pb := &PackedB{k: k, n: n, bf16: bf16, kc: kc, nK: (k + kc - 1) / kc}
	for j0 := 0; j0 < n; j0 += ncBlock {
		nb := min(ncBlock, n-j0)
		nPanels := (nb + nr - 1) / nr
		for p0 := 0; p0 < k; p0 += kc {
			kb := min(kc, k-p0)
			blk := hugepages.Floats(ops.bLen(nPanels, kb))
			ops.packB(transB, b, ldb, p0, kb, j0, nb, blk, 0, nPanels)
			pb.blocks = append(pb.blocks, blk)
		}
	}
	return pb
}

// tiles returns the GEMM precision the operand was packed for.
func (pb *PackedB) tiles() tileOps {
	if pb.bf16 {
		return bf16Tiles{}
	}
	return newFP32Tiles(true)
}

// BF16 reports whether the operand was packed in bf16 (PackBBF16).
func (pb *PackedB) BF16() bool { return pb.bf16 }

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
	return pb.blocks[(j0/ncBlock)*pb.nK+p0/pb.kc]
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
	storeTile(acc[:], c, ldc, add)
}

// storeTile stores (or, with add, adds) an mr×nr tile held row-major in
// acc into C (row stride ldc).
func storeTile(acc, c []float32, ldc int, add bool) {
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
