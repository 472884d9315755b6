package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins"
	"github.com/attnrun/attnrun/runtime/conform"
	"github.com/attnrun/attnrun/runtime/graph"
)

// emu is a host reference for the device contract: it implements device by
// executing the encoded parameter words of each launch (decoded by the
// member names of kernels.cu's structs) and each cuBLAS call (column-major,
// as cuBLAS defines it) on host memory. It is written from the kernels'
// specification, not from their CUDA code, so running the real lowering,
// arena placement, address resolution and executor through it checks all
// of the Go side of the GPU backend against PyTorch's reference outputs.
// It also checks what the GPU would refuse: launch limits, cuBLAS leading
// dimensions, reads outside an allocation or of freed memory. Fresh
// allocations hold 0xFF bytes (NaN as float32), so reading a buffer before
// it is written shows up as NaN in the outputs.
type emu struct {
	mem      map[uint64][]byte
	next     uint64
	launches int
	gemms    int
}

func newEmu() *emu { return &emu{mem: map[uint64][]byte{}, next: 1 << 32} }

func (e *emu) do(f func() error) error { return f() }

func (e *emu) alloc(n int64) (uint64, error) {
	b := make([]byte, max(n, 1))
	for i := range b {
		b[i] = 0xFF
	}
	base := e.next
	e.mem[base] = b
	e.next += uint64(alignUp(max(n, 1))) + 1<<20 // a gap: overruns do not land in the next allocation
	return base, nil
}

func (e *emu) free(p uint64) { delete(e.mem, p) }

// bytes returns the n bytes at addr, which must lie in one live allocation.
func (e *emu) bytes(addr uint64, n int64) []byte {
	for base, b := range e.mem {
		if addr >= base && addr+uint64(n) <= base+uint64(len(b)) {
			off := addr - base
			return b[off : off+uint64(n)]
		}
	}
	panic(fmt.Sprintf("access of %d bytes at %#x outside every live allocation", n, addr))
}

func (e *emu) htod(dst uint64, src []byte) error {
	copy(e.bytes(dst, int64(len(src))), src)
	return nil
}

func (e *emu) dtoh(dst []byte, src uint64) error {
	copy(dst, e.bytes(src, int64(len(dst))))
	return nil
}

func (e *emu) sync() error { return nil }

func (e *emu) f32(a uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(e.bytes(a, 4)))
}
func (e *emu) setF32(a uint64, v float32) {
	binary.LittleEndian.PutUint32(e.bytes(a, 4), math.Float32bits(v))
}

// load reads element i of type code dt at base as (float, int) like the kernels.
func (e *emu) load(dt int64, base uint64, i int64) (float64, int64) {
	switch dt {
	case int64(ir.Float):
		return float64(e.f32(base + uint64(4*i))), 0
	case int64(ir.Double):
		return math.Float64frombits(binary.LittleEndian.Uint64(e.bytes(base+uint64(8*i), 8))), 0
	case int64(ir.Int64):
		return 0, int64(binary.LittleEndian.Uint64(e.bytes(base+uint64(8*i), 8)))
	case int64(ir.Int32):
		return 0, int64(int32(binary.LittleEndian.Uint32(e.bytes(base+uint64(4*i), 4))))
	case int64(ir.Uint8), int64(ir.Bool):
		return 0, int64(e.bytes(base+uint64(i), 1)[0])
	}
	panic(fmt.Sprintf("load of type %d", dt))
}

func (e *emu) store(dt int64, base uint64, i int64, f float64, n int64, fromInt bool) {
	switch dt {
	case int64(ir.Float):
		if fromInt {
			f = float64(n)
		}
		e.setF32(base+uint64(4*i), float32(f))
	case int64(ir.Double):
		if fromInt {
			f = float64(n)
		}
		binary.LittleEndian.PutUint64(e.bytes(base+uint64(8*i), 8), math.Float64bits(f))
	case int64(ir.Int64), int64(ir.Int32), int64(ir.Uint8):
		if !fromInt {
			n = int64(f)
		}
		switch dt {
		case int64(ir.Int64):
			binary.LittleEndian.PutUint64(e.bytes(base+uint64(8*i), 8), uint64(n))
		case int64(ir.Int32):
			binary.LittleEndian.PutUint32(e.bytes(base+uint64(4*i), 4), uint32(int32(n)))
		default:
			e.bytes(base+uint64(i), 1)[0] = byte(n)
		}
	case int64(ir.Bool):
		v := byte(0)
		if (fromInt && n != 0) || (!fromInt && f != 0) {
			v = 1
		}
		e.bytes(base+uint64(i), 1)[0] = v
	default:
		panic(fmt.Sprintf("store of type %d", dt))
	}
}

// params decodes a launch's words by member name.
type params struct {
	w map[string]uint64
}

func (p params) i(n string) int64 {
	v, ok := p.w[n]
	if !ok {
		panic("no member " + n)
	}
	return int64(v)
}
func (p params) u(n string) uint64  { return uint64(p.i(n)) }
func (p params) f(n string) float64 { return math.Float64frombits(p.u(n)) }
func (p params) arr(n string) []int64 {
	out := make([]int64, p.i("rank"))
	for k := range out {
		out[k] = p.i(fmt.Sprintf("%s[%d]", n, k))
	}
	return out
}

// offsets is kernels.cu's offsets3 for any number of operands.
func offsets(i int64, shape []int64, strides ...[]int64) []int64 {
	o := make([]int64, len(strides))
	for d := len(shape) - 1; d >= 0; d-- {
		c := i % shape[d]
		i /= shape[d]
		for k, s := range strides {
			o[k] += c * s[d]
		}
	}
	return o
}

func (e *emu) launch(k *launch, words []uint64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("kernel %s: %v", k.kernel, r)
		}
	}()
	e.launches++
	if len(words) != len(k.fields) {
		return fmt.Errorf("kernel %s: %d words for %d members", k.kernel, len(words), len(k.fields))
	}
	threads := uint64(k.block[0]) * uint64(k.block[1]) * uint64(k.block[2])
	if k.grid[0] == 0 || k.grid[1] == 0 || k.grid[2] == 0 || threads == 0 || threads > 1024 || k.grid[1] > 65535 || k.shmem > 48<<10 {
		return fmt.Errorf("kernel %s: invalid launch grid %v block %v shared %d", k.kernel, k.grid, k.block, k.shmem)
	}
	p := params{w: map[string]uint64{}}
	for i, f := range k.fields {
		p.w[f.name] = words[i]
	}
	size := func() int64 { // element size of the _1/_4/_8 kernels
		switch k.kernel[len(k.kernel)-1] {
		case '1':
			return 1
		case '4':
			return 4
		}
		return 8
	}
	switch k.kernel {
	case "binary_f32", "binary_i64", "binary_i32", "binary_u8":
		dt := map[string]int64{"binary_f32": int64(ir.Float), "binary_i64": int64(ir.Int64), "binary_i32": int64(ir.Int32), "binary_u8": int64(ir.Bool)}[k.kernel]
		op := p.i("op")
		shape, sa, sb := p.arr("shape"), p.arr("sa"), p.arr("sb")
		for i := int64(0); i < p.i("n"); i++ {
			o := offsets(i, shape, sa, sb)
			af, ai := e.load(dt, p.u("a"), o[0])
			bf, bi := e.load(dt, p.u("b"), o[1])
			isInt := dt != int64(ir.Float)
			if op >= binEq {
				x, y := af, bf
				if isInt {
					x, y = float64(ai), float64(bi)
				}
				r := map[int64]bool{binEq: x == y, binLt: x < y, binGt: x > y, binLe: x <= y, binGe: x >= y}[op]
				e.store(int64(ir.Bool), p.u("out"), i, 0, map[bool]int64{true: 1}[r], true)
				continue
			}
			if !isInt {
				a32, b32 := float32(af), float32(bf)
				r := map[int64]float32{binAdd: a32 + b32, binSub: a32 - b32, binMul: a32 * b32, binDiv: a32 / b32, binPow: float32(math.Pow(af, bf))}[op]
				e.store(dt, p.u("out"), i, float64(r), 0, false)
				continue
			}
			var r int64
			switch {
			case dt == int64(ir.Bool):
				x, y := ai != 0, bi != 0
				v := map[int64]bool{binAdd: x || y, binOr: x || y, binMul: x && y, binAnd: x && y, binXor: x != y}[op]
				r = map[bool]int64{true: 1}[v]
			case op == binDiv && bi == 0:
				r = 0
			default:
				r = map[int64]int64{binAdd: ai + bi, binSub: ai - bi, binMul: ai * bi}[op]
				if op == binDiv {
					r = ai / bi
				}
			}
			e.store(dt, p.u("out"), i, 0, r, true)
		}
	case "unary_f32":
		for i := int64(0); i < p.i("n"); i++ {
			x, _ := e.load(int64(ir.Float), p.u("in"), i)
			r := map[int64]float64{unSqrt: math.Sqrt(x), unErf: math.Erf(x), unNeg: -x, unExp: math.Exp(x), unTanh: math.Tanh(x),
				unRelu: math.Max(x, 0), unAbs: math.Abs(x), unRecip: 1 / x, unSigmoid: 1 / (1 + math.Exp(-x)), unLog: math.Log(x)}[p.i("op")]
			e.store(int64(ir.Float), p.u("out"), i, r, 0, false)
		}
	case "unary_i64", "unary_u8":
		dt := map[string]int64{"unary_i64": int64(ir.Int64), "unary_u8": int64(ir.Bool)}[k.kernel]
		for i := int64(0); i < p.i("n"); i++ {
			_, x := e.load(dt, p.u("in"), i)
			r := x
			switch p.i("op") {
			case unNeg:
				r = -x
			case unAbs:
				r = max(x, -x)
			case unRelu:
				r = max(x, 0)
			case unNot:
				r = map[bool]int64{true: 1}[x == 0]
			}
			e.store(dt, p.u("out"), i, 0, r, true)
		}
	case "cast_any":
		from, to := p.i("from"), p.i("to")
		fromInt := from != int64(ir.Float) && from != int64(ir.Double)
		for i := int64(0); i < p.i("n"); i++ {
			f, n := e.load(from, p.u("in"), i)
			e.store(to, p.u("out"), i, f, n, fromInt)
		}
	case "where_1", "where_4", "where_8":
		sz := size()
		shape, sc, sx, sy := p.arr("shape"), p.arr("sc"), p.arr("sx"), p.arr("sy")
		for i := int64(0); i < p.i("n"); i++ {
			o := offsets(i, shape, sc, sx, sy)
			src := p.u("y") + uint64(o[2]*sz)
			if e.bytes(p.u("cond")+uint64(o[0]), 1)[0] != 0 {
				src = p.u("x") + uint64(o[1]*sz)
			}
			copy(e.bytes(p.u("out")+uint64(i*sz), sz), e.bytes(src, sz))
		}
	case "copy_1", "copy_4", "copy_8":
		sz := size()
		shape, sin, sout := p.arr("shape"), p.arr("sin"), p.arr("sout")
		for i := int64(0); i < p.i("n"); i++ {
			o := offsets(i, shape, sin, sout)
			copy(e.bytes(p.u("out")+uint64(o[1]*sz), sz), e.bytes(p.u("in")+uint64(o[0]*sz), sz))
		}
	case "gather_1", "gather_4", "gather_8":
		sz := size()
		inner, nidx, axis := p.i("inner"), p.i("nidx"), p.i("axis")
		idt := int64(ir.Int32)
		if p.i("idx64") != 0 {
			idt = int64(ir.Int64)
		}
		for i := int64(0); i < p.i("n"); i++ {
			j, t := i%inner, i/inner
			kk, o := t%nidx, t/nidx
			_, ix := e.load(idt, p.u("idx"), kk)
			if ix < 0 {
				ix += axis
			}
			dst := e.bytes(p.u("out")+uint64(i*sz), sz)
			if ix < 0 || ix >= axis {
				clear(dst)
				binary.LittleEndian.PutUint32(e.bytes(p.u("err"), 4), 1)
				continue
			}
			copy(dst, e.bytes(p.u("data")+uint64(((o*axis+ix)*inner+j)*sz), sz))
		}
	case "fill_1", "fill_4", "fill_8":
		sz := size()
		var word [8]byte
		binary.LittleEndian.PutUint64(word[:], p.u("bits"))
		for i := int64(0); i < p.i("n"); i++ {
			copy(e.bytes(p.u("out")+uint64(i*sz), sz), word[:sz])
		}
	case "softmax_f32":
		rows, axis, inner := p.i("rows"), p.i("axis"), p.i("inner")
		for r := int64(0); r < rows; r++ {
			base := (r/inner)*axis*inner + r%inner
			at := func(j int64) int64 { return base + j*inner }
			m := math.Inf(-1)
			for j := int64(0); j < axis; j++ {
				m = math.Max(m, float64(e.f32(p.u("in")+uint64(4*at(j)))))
			}
			s := 0.0
			for j := int64(0); j < axis; j++ {
				s += math.Exp(float64(e.f32(p.u("in")+uint64(4*at(j)))) - m)
			}
			for j := int64(0); j < axis; j++ {
				e.setF32(p.u("out")+uint64(4*at(j)), float32(math.Exp(float64(e.f32(p.u("in")+uint64(4*at(j))))-m)/s))
			}
		}
	case "layernorm_f32":
		rows, cols := p.i("rows"), p.i("cols")
		for r := int64(0); r < rows; r++ {
			x := func(j int64) float64 { return float64(e.f32(p.u("in") + uint64(4*(r*cols+j)))) }
			mean, v := 0.0, 0.0
			for j := int64(0); j < cols; j++ {
				mean += x(j)
			}
			mean /= float64(cols)
			for j := int64(0); j < cols; j++ {
				v += (x(j) - mean) * (x(j) - mean)
			}
			inv := 1 / math.Sqrt(v/float64(cols)+p.f("eps"))
			for j := int64(0); j < cols; j++ {
				pick := func(n int64) uint64 { return uint64(4 * j * map[bool]int64{true: 0, false: 1}[n == 1]) }
				o := (x(j) - mean) * inv * float64(e.f32(p.u("scale")+pick(p.i("scale_n"))))
				if p.u("bias") != 0 {
					o += float64(e.f32(p.u("bias") + pick(p.i("bias_n"))))
				}
				e.setF32(p.u("out")+uint64(4*(r*cols+j)), float32(o))
			}
			if p.u("mean") != 0 {
				e.setF32(p.u("mean")+uint64(4*r), float32(mean))
			}
			if p.u("invstd") != 0 {
				e.setF32(p.u("invstd")+uint64(4*r), float32(inv))
			}
		}
	case "rmsnorm_f32":
		rows, cols, period := p.i("rows"), p.i("cols"), p.i("period")
		if period%cols != 0 {
			return fmt.Errorf("rmsnorm: period %d is not a multiple of cols %d", period, cols)
		}
		for r := int64(0); r < rows; r++ {
			x := func(j int64) float64 { return float64(e.f32(p.u("in") + uint64(4*(r*cols+j)))) }
			ss := 0.0
			for j := int64(0); j < cols; j++ {
				ss += x(j) * x(j)
			}
			inv := 1 / math.Sqrt(ss/float64(cols)+p.f("eps"))
			for j := int64(0); j < cols; j++ {
				sc := float64(e.f32(p.u("scale") + uint64(4*((r*cols+j)%period))))
				e.setF32(p.u("out")+uint64(4*(r*cols+j)), float32(x(j)*inv*sc))
			}
		}
	case "rotary_f32":
		s, h, d, rd := p.i("s"), p.i("h"), p.i("d"), p.i("rd")
		half := rd / 2
		at := func(base uint64, i int64) float64 { return float64(e.f32(base + uint64(4*i))) }
		for i := int64(0); i < p.i("n"); i++ {
			j, v := i%d, i/d
			hh, t := v%h, v/h
			ss, bb := t%s, t/s
			off := bb*p.i("b_str") + ss*p.i("s_str") + hh*p.i("h_str")
			y := p.u("out") + uint64(4*(off+j))
			if j >= rd {
				e.setF32(y, float32(at(p.u("in"), off+j)))
				continue
			}
			row := bb*s + ss
			if p.u("pos") != 0 {
				_, row = e.load(int64(ir.Int64), p.u("pos"), bb*s+ss)
				if row < 0 || row >= p.i("cache_rows") {
					e.setF32(y, 0)
					binary.LittleEndian.PutUint32(e.bytes(p.u("err"), 4), 1)
					continue
				}
			}
			j1, j2, first := j, j+half, j < half
			if !first {
				j1, j2 = j-half, j
			}
			if p.i("interleaved") == 1 {
				j1, j2, first = j&^1, j|1, j%2 == 0
			}
			k := j1
			if p.i("interleaved") == 1 {
				k = j1 / 2
			}
			c, sn := at(p.u("cos"), row*half+k), at(p.u("sin"), row*half+k)
			x1, x2 := at(p.u("in"), off+j1), at(p.u("in"), off+j2)
			r := sn*x1 + c*x2
			if first {
				r = c*x1 - sn*x2
			}
			e.setF32(y, float32(r))
		}
	case "trilu_1", "trilu_4", "trilu_8":
		sz := size()
		rows, cols, kk := p.i("rows"), p.i("cols"), p.i("k")
		for i := int64(0); i < p.i("n"); i++ {
			j, r := i%cols, (i/cols)%rows
			keep := j-r <= kk
			if p.i("upper") != 0 {
				keep = j-r >= kk
			}
			dst := e.bytes(p.u("out")+uint64(i*sz), sz)
			if keep {
				copy(dst, e.bytes(p.u("in")+uint64(i*sz), sz))
			} else {
				clear(dst)
			}
		}
	case "attention_f32":
		return e.attention(k, p)
	default:
		return fmt.Errorf("unknown kernel %s", k.kernel)
	}
	return nil
}

func (e *emu) attention(k *launch, p params) error {
	sq, sk, d, dv := p.i("sq"), p.i("sk"), p.i("d"), p.i("dv")
	if int64(k.grid[0])*attnQRows < sq || k.block[0] != attnThreads || k.shmem != attnShared(int(d), int(dv)) || d > attnMaxD || dv > attnMaxD {
		return fmt.Errorf("attention launch grid %v block %v shared %d does not cover sq=%d d=%d dv=%d", k.grid, k.block, k.shmem, sq, d, dv)
	}
	shape := p.arr("bshape")
	kind := p.i("mask_kind")
	softcap, mode := p.f("softcap"), p.i("scores_mode")
	f32 := func(base uint64, i int64) float64 { return float64(e.f32(base + uint64(4*i))) }
	for b := int64(0); b < p.i("batches"); b++ {
		o := offsets(b, shape, p.arr("bq"), p.arr("bk"), p.arr("bv"), p.arr("bm"), p.arr("bo"), p.arr("bl"))
		klim := sk
		if p.u("kvlen") != 0 {
			_, n := e.load(int64(ir.Int64), p.u("kvlen"), o[5])
			klim = min(max(n, 0), sk)
		}
		score := func(row, j int64, v float64) {
			e.setF32(p.u("scores")+uint64(4*((b*sq+row)*sk+j)), float32(v))
		}
		for row := int64(0); row < sq; row++ {
			s := make([]float64, sk)
			m := math.Inf(-1)
			for j := int64(0); j < sk; j++ {
				dot := 0.0
				for c := int64(0); c < d; c++ {
					dot += f32(p.u("q"), o[0]+row*p.i("q_rs")+c*p.i("q_cs")) * f32(p.u("k"), o[1]+j*p.i("k_js")+c*p.i("k_cs"))
				}
				s[j] = dot * p.f("scale")
				if mode == scoresRaw {
					score(row, j, s[j])
				}
				if softcap > 0 {
					s[j] = softcap * math.Tanh(s[j]/softcap)
				}
				if mode == scoresSoftcapped {
					score(row, j, s[j])
				}
				mi := o[3] + row*p.i("m_row") + j*p.i("m_col")
				switch {
				case kind != maskNone && j >= p.i("mask_keys"):
					s[j] = math.Inf(-1)
				case kind == maskAdditive:
					s[j] += f32(p.u("mask"), mi) * p.f("mask_scale")
				case kind == maskBoolTrue, kind == maskBoolFalse:
					if (e.bytes(p.u("mask")+uint64(mi), 1)[0] != 0) == (kind == maskBoolTrue) {
						s[j] = p.f("fill")
					}
				}
				if j >= klim || (p.i("causal") == 1 && j > row+p.i("causal_off")) {
					s[j] = math.Inf(-1)
				}
				if mode >= scoresBiased {
					score(row, j, s[j])
				}
				m = math.Max(m, s[j])
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			if mode == scoresWeights {
				for j, x := range s {
					w := x / sum
					if math.IsInf(m, -1) {
						w = math.NaN()
					}
					score(row, int64(j), w)
				}
			}
			for c := int64(0); c < dv; c++ {
				acc := 0.0
				for j := int64(0); j < sk; j++ {
					acc += s[j] * f32(p.u("v"), o[2]+j*p.i("v_js")+c*p.i("v_cs"))
				}
				r := float32(acc / sum)
				if math.IsInf(m, -1) {
					r = float32(math.NaN())
				}
				e.setF32(p.u("out")+uint64(4*(o[4]+row*p.i("o_rs")+c*p.i("o_cs"))), r)
			}
		}
	}
	return nil
}

// sgemm is cublasSgemmStridedBatched's definition, column-major, with its
// argument checks.
func (e *emu) sgemm(g blasCall) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sgemm: %v", r)
		}
	}()
	e.gemms++
	rowsA, rowsB := g.m, g.k
	if g.transA {
		rowsA = g.k
	}
	if g.transB {
		rowsB = g.n
	}
	if g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 1 || g.lda < max(1, rowsA) || g.ldb < max(1, rowsB) || g.ldc < max(1, g.m) {
		return fmt.Errorf("CUBLAS_STATUS_INVALID_VALUE: %+v", g)
	}
	for bi := 0; bi < g.batch; bi++ {
		a := g.a + uint64(4*int64(bi)*g.strideA)
		b := g.b + uint64(4*int64(bi)*g.strideB)
		c := g.c + uint64(4*int64(bi)*g.strideC)
		for j := 0; j < g.n; j++ {
			for r := 0; r < g.m; r++ {
				acc := 0.0
				for l := 0; l < g.k; l++ {
					ai := r + l*g.lda
					if g.transA {
						ai = l + r*g.lda
					}
					bj := l + j*g.ldb
					if g.transB {
						bj = j + l*g.ldb
					}
					acc += float64(e.f32(a+uint64(4*ai))) * float64(e.f32(b+uint64(4*bj)))
				}
				v := float64(g.alpha) * acc
				ci := c + uint64(4*(r+j*g.ldc))
				if g.beta != 0 { // cuBLAS does not read C when beta is 0
					v += float64(g.beta) * float64(e.f32(ci))
				}
				e.setF32(ci, float32(v))
			}
		}
	}
	return nil
}

// emuRunner runs a model as one partition of a Server on the emulator.
type emuRunner struct {
	s        *Server
	e        *emu
	id       plugins.PartitionID
	in, outs []string
}

func (r *emuRunner) InputNames() []string  { return r.in }
func (r *emuRunner) OutputNames() []string { return r.outs }
func (r *emuRunner) Close() error          { return r.s.Release(context.Background(), r.id) }
func (r *emuRunner) Run(ctx context.Context, in map[string]*ir.Tensor) (map[string]*ir.Tensor, error) {
	return r.s.Run(ctx, r.id, in)
}

func emuOpener(noFuse bool, runners *[]*emuRunner) conform.Opener {
	return func(ctx context.Context, path string) (conform.Runner, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		e := newEmu()
		s := &Server{dev: e, parts: map[plugins.PartitionID]*partition{}}
		id, _, err := s.Compile(ctx, data, plugins.CompileOptions{NoFuse: noFuse})
		if err != nil {
			return nil, err
		}
		p := s.parts[id]
		r := &emuRunner{s: s, e: e, id: id}
		for _, vi := range p.prog.Model.Graph.Inputs {
			r.in = append(r.in, vi.Name)
		}
		for _, vi := range p.prog.Model.Graph.Outputs {
			r.outs = append(r.outs, vi.Name)
		}
		*runners = append(*runners, r)
		return r, nil
	}
}

// gpuMissingOps lists, for the bundled models that use ops the GPU backend
// has no kernel for, exactly those ops. A session runs such nodes on the
// cpu backend (a logged fallback); this test talks to the GPU server
// alone, so a run that reaches one of them is skipped, saying so, and the
// capability check requires the refused ops to be exactly these (a kernel
// added later must update the list).
var gpuMissingOps = map[string][]string{
	"einsum_attention":               {"Einsum"},
	"einsum_cross_attention":         {"Einsum"},
	"einsum_swapped_attention":       {"Einsum"},
	"dalle_stable_softmax_attention": {"Einsum", "ReduceMax"},
	// Its causal mask: ones in float16, tril, cast to bool (folded on the host at run time).
	"mpt_attention": {"Cast", "Trilu"},
	// The Max that floors its scores (the fused node's scores_min, which the GPU
	// kernel does not take) and its mask's Range.
	"opt_attention":              {"Max", "Range"},
	"llama_attention_opset17":    {"Cos", "ReduceMean", "Sin"},
	"llama_padded_attention":     {"Cos", "CumSum", "Sin"},
	"llama_padded_attention_add": {"Cos", "CumSum", "Sin"},
	// Its rotary table from arange(S) and its mask's Range (folded on the host at run time).
	"mistral_sliding_window_attention": {"Cos", "Range", "Sin"},
	// transformers 4.44's mask: its slice assignment is a ScatterND.
	"llama_update_causal_mask": {"Cos", "Range", "ScatterND", "Sin"},
	"bloom_attention":          {"CumSum"},       // its ALiBi positions: cumsum(attention_mask)
	"t5_attention":             {"Min", "Range"}, // folded on the host at run time
	"t5_attention_opset13":     {"Min", "Range"}, // as t5_attention
	// As t5_attention, and T5LayerNorm's mean of squares (no GPU ReduceMean kernel yet).
	"t5_encoder": {"Min", "Range", "ReduceMean"},
	// The opset-14 encoder's LayerNorms are ReduceMean chains (no GPU ReduceMean kernel yet).
	"s001_encoder_2x4_opset14": {"ReduceMean"},
	"torch_mha_need_weights":   {"ReduceSum"},

	// nn.GroupNorm exports as InstanceNormalization, which has no GPU kernel yet.
	"diffusers_spatial_attention": {"InstanceNormalization"},
	// F.normalize exports as ReduceL2 + Clip (+ Expand, Div), which the
	// cpu backend fuses into com.attnrun:NormalizeL2 (no GPU kernel
	// either); the logit scale's clamp is a Clip too.
	"swinv2_window_attention": {"ReduceL2", "Clip"},
	// Its relative positions: the tables gathered by Range-made indices
	// (folded on the host at run time) and two einsums of Q with them.
	"sam_relpos_attention": {"Einsum", "Range"},
	"sam_vision_attention": {"Einsum", "Range"},
	"mvitv2_attention":     {"Einsum", "Range", "ScatterND"}, // its slice assignment, unfused
	// Its row maximum taken off (CogView's PB-relax): the GPU kernel takes
	// no bias beside the mask, so the chain runs node by node there.
	"layoutlmv3_attention": {"ReduceMax"},
	// The clamp of its per-head temperature.
	"temperature_attention": {"Clip"},
	// Its rotary table from arange(S), and the row maximum taken off the
	// scores with the sinks joined: the GPU attention kernel takes no sinks
	// (the chain runs node by node there).
	"gpt_oss_attention": {"Cos", "Range", "ReduceMax", "Sin"},
}

// TestModelsOnEmulator lowers every reference model in models/ (fused and
// unfused), runs it through the executor on the emulator and compares with
// PyTorch's outputs at attnrun conform's default tolerance. It also checks
// that the GPU backend accepts every node of these models (but the ops
// gpuMissingOps lists).
func TestModelsOnEmulator(t *testing.T) {
	cases, err := conform.Find([]string{"../../models"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, noFuse := range []bool{false, true} {
			name := c.Name
			if noFuse {
				name += "/nofuse"
			}
			t.Run(name, func(t *testing.T) {
				var runners []*emuRunner
				res := conform.Run(context.Background(), c, emuOpener(noFuse, &runners), conform.Tolerance{Rtol: 1e-4, Atol: 1e-5})
				if !res.Pass && res.Err != nil && strings.Contains(res.Err.Error(), "the gpu backend has no kernel for this op") {
					for _, op := range gpuMissingOps[c.Name] {
						if strings.Contains(res.Err.Error(), "("+op+")") {
							t.Skipf("the gpu backend has no %s kernel (a session runs it on the cpu backend): %v", op, res.Err)
						}
					}
				}
				if !res.Pass {
					t.Fatalf("%v (max abs %g, max rel %g)", res.Err, res.MaxAbs, res.MaxRel)
				}
				if len(runners) != 1 || runners[0].e.launches+runners[0].e.gemms == 0 {
					t.Fatalf("nothing ran on the emulated device")
				}
				if len(runners[0].e.mem) != 0 {
					t.Errorf("%d device allocations left after Release", len(runners[0].e.mem))
				}
			})
		}
		t.Run(c.Name+"/capability", func(t *testing.T) {
			m, err := loadModel(filepath.Join(c.Dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			prog, err := graph.Compile(m, graph.Options{})
			if err != nil {
				t.Fatal(err)
			}
			missing := gpuMissingOps[c.Name]
			if len(missing) == 0 {
				requireAccepted(t, prog)
				return
			}
			refused := map[string]bool{}
			for _, n := range prog.Order {
				if v := verdict(nodeQuery(prog, n)); !v.Accepted {
					refused[n.OpType] = true
					if !slices.Contains(missing, n.OpType) {
						t.Errorf("node %s refused: %s", n.Label(), v.Reason)
					}
				}
			}
			for _, op := range missing {
				if !refused[op] {
					t.Errorf("gpuMissingOps lists %s, but the gpu backend takes every %s node of the model: update the list", op, op)
				}
			}
		})
	}
}

// TestEmulatorFusedAttentionRuns checks that the fused models really run
// the attention kernel (and the unfused ones do not).
func TestEmulatorFusedAttentionRuns(t *testing.T) {
	m, err := loadModel("../../models/s000_multi_head/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for _, noFuse := range []bool{false, true} {
		prog, err := graph.Compile(m, graph.Options{NoFuse: noFuse})
		if err != nil {
			t.Fatal(err)
		}
		in := zeroInputs(t, prog, map[string]int{})
		pl, err := lowerPlan(prog, in, map[string]bool{})
		if err != nil {
			t.Fatal(err)
		}
		var kernels []string
		for _, c := range pl.calls {
			if c.k != nil {
				kernels = append(kernels, c.k.kernel)
			} else {
				kernels = append(kernels, "sgemm")
			}
		}
		sort.Strings(kernels)
		has := false
		for _, k := range kernels {
			has = has || k == "attention_f32"
		}
		if has == noFuse {
			t.Errorf("noFuse=%v: kernels %v", noFuse, kernels)
		}
	}
}
