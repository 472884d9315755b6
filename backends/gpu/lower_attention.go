package gpu

// Lowering FusedAttention to the device's attention kernel: the operand
// views' geometry, which nodes the kernel takes (attnLowerable), and the
// launch.

import (
	"math"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops"
)

// attnOperand is one FusedAttention operand as the kernel reads it: its
// logical shape and the view (offset, element strides) over its input's
// data.
type attnOperand struct {
	shape   []int
	strides []int
	offset  int
}

// attnShapes are a FusedAttention node's concrete geometry.
type attnShapes struct {
	batch                  []int // the logical batch (heads of Q)
	q, k, v, out           attnOperand
	qB, kB, vB, mB         []int
	sq, d, sk, dv          int
	msq, msk               int
	kT, hasMask            bool
	scale, fill, maskScale float32
	maskKind               string
	// ONNX Attention's extras (ops/attention.go).
	group       int
	softcap     float32
	causal      bool
	causalOff   int
	padKeys     bool
	hasLens     bool
	scoresMode  string
	scoresShape []int
}

// attnView reads a view attribute (q_view, ...) or returns the contiguous
// view of shape.
func attnView(n *ir.Node, attr string, shape []int) (attnOperand, error) {
	ints, ok, err := n.AttrInts(attr)
	if err != nil {
		return attnOperand{}, n.Errorf("%w", err)
	}
	if !ok {
		return attnOperand{shape: shape, strides: contiguous(shape)}, nil
	}
	v, err := ops.ParseView(ints)
	if err != nil {
		return attnOperand{}, n.Errorf("attribute %s: %w", attr, err)
	}
	return attnOperand{shape: v.Shape, strides: v.Strides, offset: v.Offset}, nil
}

func attnGeometry(n *ir.Node, types map[string]ops.Value) (attnShapes, error) {
	var g attnShapes
	shape := func(i int) ([]int, error) {
		v := types[n.Input(i)]
		dims, ok := v.Type.Shape.Concrete()
		if !ok || !v.Type.RankKnown {
			return nil, n.Errorf("input %d has no concrete shape", i)
		}
		return dims, nil
	}
	var ops3 [3]attnOperand
	for i, attr := range []string{"q_view", "k_view", "v_view"} {
		s, err := shape(i)
		if err != nil {
			return g, err
		}
		if ops3[i], err = attnView(n, attr, s); err != nil {
			return g, err
		}
		if len(ops3[i].shape) < 2 {
			return g, n.Errorf("Q, K, V need rank ≥ 2")
		}
	}
	g.q, g.k, g.v = ops3[0], ops3[1], ops3[2]
	q, k, v := g.q.shape, g.k.shape, g.v.shape
	kt, err := n.AttrInt("k_transposed", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.kT = kt == 1
	g.qB, g.sq, g.d = q[:len(q)-2], q[len(q)-2], q[len(q)-1]
	g.kB = k[:len(k)-2]
	kd := k[len(k)-1]
	g.sk = k[len(k)-2]
	if g.kT {
		kd, g.sk = k[len(k)-2], k[len(k)-1]
	}
	g.vB, g.dv = v[:len(v)-2], v[len(v)-1]
	if kd != g.d || v[len(v)-2] != g.sk {
		return g, n.Errorf("Q %v, K %v, V %v do not fit together", q, k, v)
	}
	if g.scale, err = n.AttrFloat("scale", 1); err != nil {
		return g, n.Errorf("%w", err)
	}
	group, err := n.AttrInt("kv_group", 1)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.group = int(group)
	// Broadcast with K's and V's heads standing for Q's (grouped heads).
	kBB, vBB := g.kB, g.vB
	if g.group > 1 {
		if len(g.qB) == 0 || len(g.kB) == 0 || len(g.vB) == 0 {
			return g, n.Errorf("kv_group needs a heads dim")
		}
		hq := g.qB[len(g.qB)-1]
		for _, b := range []*[]int{&kBB, &vBB} {
			c := append([]int{}, *b...)
			if h := c[len(c)-1]; h != 1 {
				if h*g.group != hq {
					return g, n.Errorf("kv_group %d: Q has %d heads, K/V %d", g.group, hq, h)
				}
				c[len(c)-1] = hq
			}
			*b = c
		}
	}
	if g.softcap, err = n.AttrFloat("softcap", 0); err != nil {
		return g, n.Errorf("%w", err)
	}
	if lo, err := n.AttrFloat("scores_min", float32(math.Inf(-1))); err != nil || !math.IsInf(float64(lo), -1) {
		return g, n.Errorf("scores_min (a clamp of the scores, OPT's) is not in the GPU attention kernel")
	}
	causal, err := n.AttrInt("causal", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.causal = causal == 1
	off, err := n.AttrInt("causal_offset", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.causalOff = int(off)
	pad, err := n.AttrInt("mask_pad_keys", 0)
	if err != nil {
		return g, n.Errorf("%w", err)
	}
	g.padKeys = pad == 1
	g.msq, g.msk = 1, 1
	if n.Input(3) != "" {
		g.hasMask = true
		m, err := shape(3)
		if err != nil {
			return g, err
		}
		for len(m) < 2 {
			m = append([]int{1}, m...)
		}
		g.mB, g.msq, g.msk = m[:len(m)-2], m[len(m)-2], m[len(m)-1]
		badKeys := g.msk != 1 && g.msk != g.sk
		if g.padKeys {
			badKeys = g.msk > g.sk
		}
		if (g.msq != 1 && g.msq != g.sq) || badKeys {
			return g, n.Errorf("mask %v does not broadcast to the scores [%d %d]", m, g.sq, g.sk)
		}
		if g.maskKind, err = n.AttrString("mask_kind", ""); err != nil {
			return g, n.Errorf("%w", err)
		}
		if g.fill, err = n.AttrFloat("mask_fill", float32(math.Inf(-1))); err != nil {
			return g, n.Errorf("%w", err)
		}
		if g.maskScale, err = n.AttrFloat("mask_scale", 1); err != nil {
			return g, n.Errorf("%w", err)
		}
	}
	g.hasLens = n.Input(4) != ""
	if n.Input(5) != "" {
		// attention_f32 applies one mask; a chain with a second additive
		// term (FusedAttention's bias) runs its original nodes instead.
		return g, n.Errorf("a bias input (5) beside the mask: the attention kernel takes one mask")
	}
	if n.Input(6) != "" {
		return g, n.Errorf("sinks (input 6, a logit a head in every softmax row) are not in the GPU attention kernel")
	}
	if g.batch, err = ops.BroadcastShapes(g.qB, kBB, vBB, g.mB); err != nil {
		return g, n.Errorf("%w", err)
	}
	logical := append(append([]int{}, g.batch...), g.sq, g.dv)
	if g.out, err = attnView(n, "out_view", logical); err != nil {
		return g, err
	}
	if len(g.out.shape) != len(logical) || !ops.SameShape(g.out.shape, logical) {
		return g, n.Errorf("out_view %v does not have the result's shape %v", g.out.shape, logical)
	}
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		if g.scoresMode, err = n.AttrString("scores_mode", ""); err != nil {
			return g, n.Errorf("%w", err)
		}
		g.scoresShape = append(append([]int{}, g.batch...), g.sq, g.sk)
	}
	return g, nil
}

// viewBatchStrides returns the element strides with which an operand whose
// logical batch dims are dims (with strides st) is read for each dim of the
// broadcast batch shape: its own stride where it has the dim, 0 where it
// is broadcast.
func viewBatchStrides(batch, dims, st []int) []int {
	out := make([]int, len(batch))
	off := len(batch) - len(dims)
	for i, d := range dims {
		if d != 1 {
			out[off+i] = st[i]
		}
	}
	return out
}

// attnLowerable reports whether the attention kernel takes a fused node's
// head sizes and attributes; if not, the graph's original nodes run
// instead. The kernel has no masked_rows_uniform or masked_rows_zero (its
// rows that see no key are NaN) and no finite causal_fill (it cuts past the
// diagonal with no per-row check), so a node with any runs unfused, as the
// export wrote it.
func attnLowerable(n *ir.Node, types map[string]ops.Value) bool {
	for _, attr := range []string{"masked_rows_uniform", "masked_rows_zero"} {
		if u, _ := n.AttrInt(attr, 0); u != 0 {
			return false
		}
	}
	if f, err := n.AttrFloat("causal_fill", float32(math.Inf(-1))); err != nil || !math.IsInf(float64(f), -1) {
		return false
	}
	g, err := attnGeometry(n, types)
	return err == nil && g.d <= attnMaxD && g.dv <= attnMaxD
}

func (l *lowerer) attention(n *ir.Node) error {
	g, err := attnGeometry(n, l.types)
	if err != nil {
		return err
	}
	var names [5]string
	for i := 0; i < 5; i++ {
		if (i == 3 && !g.hasMask) || (i == 4 && !g.hasLens) {
			continue
		}
		if names[i], err = l.in(n, i); err != nil {
			return err
		}
	}
	out, err := l.out(n, 0)
	if err != nil {
		return err
	}
	scores := ""
	if g.scoresMode != "" {
		if scores, err = l.out(n, 1); err != nil {
			return err
		}
	}
	batches := int(ir.NumElements(g.batch))
	if batches*g.sq*(g.dv+g.sk) == 0 {
		return nil
	}
	if g.sk == 0 {
		// Zeros, written through the output view.
		return l.fillView(out, g.out)
	}
	a := attnArgs{out: out, q: names[0], k: names[1], v: names[2], mask: names[3],
		oOff: g.out.offset, qOff: g.q.offset, kOff: g.k.offset, vOff: g.v.offset,
		sq: g.sq, sk: g.sk, d: g.d, dv: g.dv, batches: batches,
		scale: float64(g.scale), fill: float64(g.fill), maskScale: float64(g.maskScale),
		softcap: float64(g.softcap), causal: g.causal, causalOff: g.causalOff, maskKeys: g.sk,
		kvLen: names[4], scores: scores, scoresMode: attnScoresModes[g.scoresMode]}
	rq, rk, rv, ro := len(g.q.shape), len(g.k.shape), len(g.v.shape), len(g.out.shape)
	a.qRS, a.qCS = g.q.strides[rq-2], g.q.strides[rq-1]
	a.kJS, a.kCS = g.k.strides[rk-2], g.k.strides[rk-1]
	if g.kT {
		a.kJS, a.kCS = a.kCS, a.kJS
	}
	a.vJS, a.vCS = g.v.strides[rv-2], g.v.strides[rv-1]
	a.oRS, a.oCS = g.out.strides[ro-2], g.out.strides[ro-1]
	bq := viewBatchStrides(g.batch, g.qB, g.q.strides)
	bk := viewBatchStrides(g.batch, g.kB, g.k.strides)
	bv := viewBatchStrides(g.batch, g.vB, g.v.strides)
	bo := append([]int{}, g.out.strides[:len(g.batch)]...)
	bm := make([]int, len(g.batch))
	bl := make([]int, len(g.batch))
	if g.hasLens {
		lens, err := l.shape(names[4])
		if err != nil {
			return err
		}
		if len(lens) != 1 || len(g.batch) == 0 || (lens[0] != 1 && lens[0] != g.batch[0]) {
			return n.Errorf("kv_lengths %v does not fit the batch %v", lens, g.batch)
		}
		if lens[0] != 1 {
			bl[0] = 1
		}
	}
	if g.hasMask {
		mshape := append(append([]int{}, g.mB...), g.msq, g.msk)
		mst := contiguous(mshape)
		bm = viewBatchStrides(g.batch, g.mB, mst)
		switch g.maskKind {
		case ops.MaskBoolTrueMasks:
			a.maskKind = maskBoolTrue
		case ops.MaskBoolFalseMasks:
			a.maskKind = maskBoolFalse
		case ops.MaskAdditive:
			a.maskKind = maskAdditive
		default:
			return n.Errorf("mask_kind %q", g.maskKind)
		}
		if want := attnMaskDType(g.maskKind); l.dtype(names[3]) != want {
			return n.Errorf("mask is %v, mask_kind %q takes %v", l.dtype(names[3]), g.maskKind, want)
		}
		if g.msq != 1 {
			a.mRow = g.msk
		}
		if g.msk != 1 {
			a.mCol = 1
		}
		if g.padKeys && g.msk < g.sk {
			a.maskKeys = g.msk
			if g.msk == 1 {
				a.mCol = 0 // one key: no broadcast, the rest is padding
			}
		}
	}
	shape := g.batch
	all := [][]int{bq, bk, bv, bm, bo, bl}
	if g.group > 1 && len(g.batch) > 0 {
		// Query head h = kv head h/g and member h%g: the heads axis
		// becomes (kv heads, g), along which K and V do not move.
		ha := len(g.batch) - 1
		shape = append(append([]int{}, g.batch[:ha]...), g.batch[ha]/g.group, g.group)
		for k, st := range all {
			s := st[ha]
			split := []int{s * g.group, s}
			if k == 1 || k == 2 { // K, V: their own heads axis
				split = []int{s, 0}
			}
			all[k] = append(append(append([]int{}, st[:ha]...), split...), st[ha+1:]...)
		}
	}
	shape, st := coalesce(shape, all...)
	if err := l.stridedOK(shape); err != nil {
		return err
	}
	a.bshape, a.bq, a.bk, a.bv, a.bmask, a.bo, a.bl = shape, st[0], st[1], st[2], st[3], st[4], st[5]
	k := &launch{kernel: "attention_f32", params: "PAttn", fields: attnParams(a).fields,
		grid: attnGrid(g.sq, batches), block: [3]uint32{attnThreads, 1, 1}, shmem: attnShared(g.d, g.dv)}
	l.emit(k)
	return nil
}

// fillView writes float32 zeros through a view of out.
func (l *lowerer) fillView(out string, v attnOperand) error {
	cnt := ir.NumElements(v.shape)
	if cnt == 0 {
		return nil
	}
	// A zero source read with stride 0: a one-element constant.
	zero := l.hostConst("#zero-f32", ir.Scalar(float32(0)))
	if _, err := l.read(zero); err != nil {
		return err
	}
	return l.copyKernel(ir.Float, out, 4*int64(v.offset), zero, 0, v.shape, make([]int, len(v.shape)), v.strides)
}

func attnMaskDType(kind string) ir.DType {
	if kind == ops.MaskAdditive {
		return ir.Float
	}
	return ir.Bool
}
