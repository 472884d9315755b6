package viz

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/ops"
)

// AdditiveMaskedBelow is the value at or below which an additive mask
// entry counts as masking its position (-1e4 and below: BERT's -10000,
// -1e9, float32's lowest and -inf all mask; small biases do not).
const AdditiveMaskedBelow = -1e4

// CoreWeights is one attention core's weights from one run.
type CoreWeights struct {
	// Name identifies the core (its Softmax node's name).
	Name string
	// Nodes are the labels of the core's nodes, scores MatMul to P·V, and
	// Ops their op types.
	Nodes, Ops []string
	// Weights is float32 [..., Sq, Sk]: the last two dims are queries and
	// keys; the one before them (if any) is the head.
	Weights *ir.Tensor
	// Mask, when not nil, is the tensor masking the scores, broadcastable
	// to Weights; MaskKind says how (ops.MaskBoolTrueMasks, ...).
	Mask     *ir.Tensor
	MaskKind string
	// MaskPadKeys lets the mask's last dim be shorter than the keys, which
	// it then masks (ONNX Attention's attn_mask).
	MaskPadKeys bool
	// Causal masks key j for query i when j > i + CausalOffset (ONNX
	// Attention's is_causal; the offset is the KV cache's length).
	Causal       bool
	CausalOffset int
	// KeyLengths, when not nil, is int64 [batch]: the keys of batch item b
	// at or beyond KeyLengths[b] are masked (ONNX Attention's
	// nonpad_kv_seqlen).
	KeyLengths *ir.Tensor
}

// layout splits a weights shape into batch items, heads, queries and keys.
type layout struct {
	batch, heads, sq, sk int
	// rank of the leading dims: 0 (one matrix), 1 (items), ≥ 2 (batch, head)
	lead int
}

func layoutOf(shape []int) (layout, error) {
	r := len(shape)
	if r < 2 {
		return layout{}, fmt.Errorf("weights of shape [%s] have rank %d, want ≥ 2", ir.ShapeString(shape), r)
	}
	l := layout{batch: 1, heads: 1, sq: shape[r-2], sk: shape[r-1], lead: r - 2}
	if r >= 3 {
		l.heads = shape[r-3]
	}
	for _, d := range shape[:max(r-3, 0)] {
		l.batch *= d
	}
	return l, nil
}

// label names one matrix of a layout.
func (l layout) label(b, h int) string {
	switch {
	case l.lead == 0:
		return ""
	case l.lead == 1:
		return fmt.Sprintf("item %d", h)
	}
	return fmt.Sprintf("batch %d, head %d", b, h)
}

// masked returns which positions of weights (shape ws) the mask hides, or
// nil when there is no mask.
func masked(ws []int, mask *ir.Tensor, kind string, padKeys bool) ([]bool, error) {
	if mask == nil {
		return nil, nil
	}
	ms := mask.Shape
	if len(ms) > len(ws) {
		return nil, fmt.Errorf("mask of shape [%s] has a higher rank than the weights [%s]", ir.ShapeString(ms), ir.ShapeString(ws))
	}
	// Strides of the mask seen with the weights' rank, 0 where it
	// broadcasts.
	strides := make([]int, len(ws))
	stride := 1
	// With padKeys, the mask may cover fewer keys than there are (ONNX
	// Attention's): the keys beyond it are masked.
	keys := ws[len(ws)-1]
	for i := len(ws) - 1; i >= 0; i-- {
		k := i - (len(ws) - len(ms))
		if k < 0 {
			continue
		}
		switch {
		case ms[k] == ws[i]:
			strides[i] = stride
		case ms[k] == 1:
		case padKeys && i == len(ws)-1 && ms[k] < ws[i]:
			strides[i], keys = stride, ms[k]
		default:
			return nil, fmt.Errorf("mask of shape [%s] does not broadcast to the weights [%s]", ir.ShapeString(ms), ir.ShapeString(ws))
		}
		stride *= ms[k]
	}
	var hides func(int) bool
	switch {
	case kind == ops.MaskAdditive && mask.DType == ir.Float:
		v := mask.Float32s()
		hides = func(i int) bool { return float64(v[i]) <= AdditiveMaskedBelow || math.IsNaN(float64(v[i])) }
	case (kind == ops.MaskBoolTrueMasks || kind == ops.MaskBoolFalseMasks) && mask.DType == ir.Bool:
		v := mask.Bools()
		want := kind == ops.MaskBoolTrueMasks
		hides = func(i int) bool { return v[i] == want }
	default:
		return nil, fmt.Errorf("mask of type %v with kind %q", mask.DType, kind)
	}
	n := int(ir.NumElements(ws))
	out := make([]bool, n)
	idx := make([]int, len(ws))
	mi := 0
	last := len(ws) - 1
	for i := 0; i < n; i++ {
		out[i] = idx[last] >= keys || hides(mi)
		// advance the multi-index and the mask's offset
		for d := len(ws) - 1; d >= 0; d-- {
			idx[d]++
			mi += strides[d]
			if idx[d] < ws[d] {
				break
			}
			mi -= strides[d] * ws[d]
			idx[d] = 0
		}
	}
	return out, nil
}

// maskCausal adds the causal triangle to hidden (allocated when nil).
func maskCausal(hidden []bool, l layout, offset int) []bool {
	if hidden == nil {
		hidden = make([]bool, l.batch*l.heads*l.sq*l.sk)
	}
	for m := 0; m < l.batch*l.heads; m++ {
		for i := 0; i < l.sq; i++ {
			for j := i + offset + 1; j < l.sk; j++ {
				hidden[(m*l.sq+i)*l.sk+j] = true
			}
		}
	}
	return hidden
}

// maskKeyLengths marks, in hidden (nil: nothing masked yet), the keys of
// each batch item at or beyond its length in lengths (int64 [batch]).
func maskKeyLengths(hidden []bool, l layout, lengths *ir.Tensor) ([]bool, error) {
	if lengths.DType != ir.Int64 || len(lengths.Shape) != 1 || lengths.Shape[0] != l.batch {
		return nil, fmt.Errorf("key lengths %v [%s]: want int64 [%d], one per batch item", lengths.DType, ir.ShapeString(lengths.Shape), l.batch)
	}
	if hidden == nil {
		hidden = make([]bool, l.batch*l.heads*l.sq*l.sk)
	}
	for b, n := range lengths.Int64s() {
		from := int(max(0, min(n, int64(l.sk))))
		for m := b * l.heads; m < (b+1)*l.heads; m++ {
			for i := 0; i < l.sq; i++ {
				row := hidden[(m*l.sq+i)*l.sk : (m*l.sq+i+1)*l.sk]
				for j := from; j < l.sk; j++ {
					row[j] = true
				}
			}
		}
	}
	return hidden, nil
}

// MapFile is one heat map written by WriteAttentionMaps.
type MapFile struct {
	Core, Batch, Head int
	Label             string // "batch 0, head 1", "item 3" or ""
	PNG               string // file name in the directory
}

// CoreFiles lists what WriteAttentionMaps wrote for one core.
type CoreFiles struct {
	Name  string
	Nodes []string
	Shape []int
	NPY   string // the weights, file name in the directory
	Maps  []MapFile
}

// WriteAttentionMaps writes, into dir, each core's weights as
// core<K>.npy, one heat map per batch item and head as
// core<K>_b<B>_h<H>.png, and index.html laying them out (title names the
// model and run). It returns what it wrote.
func WriteAttentionMaps(dir, title string, cores []CoreWeights) ([]CoreFiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var all []CoreFiles
	type job struct {
		path, what string
		h          *HeatMap
	}
	var jobs []job
	for k, c := range cores {
		if c.Weights == nil || c.Weights.DType != ir.Float {
			return nil, fmt.Errorf("core %s: weights are not float32", c.Name)
		}
		l, err := layoutOf(c.Weights.Shape)
		if err != nil {
			return nil, fmt.Errorf("core %s: %w", c.Name, err)
		}
		hidden, err := masked(c.Weights.Shape, c.Mask, c.MaskKind, c.MaskPadKeys)
		if err != nil {
			return nil, fmt.Errorf("core %s: %w", c.Name, err)
		}
		if c.Causal {
			hidden = maskCausal(hidden, l, c.CausalOffset)
		}
		if c.KeyLengths != nil {
			if hidden, err = maskKeyLengths(hidden, l, c.KeyLengths); err != nil {
				return nil, fmt.Errorf("core %s: %w", c.Name, err)
			}
		}
		cf := CoreFiles{Name: c.Name, Nodes: c.Nodes, Shape: c.Weights.Shape, NPY: fmt.Sprintf("core%d.npy", k)}
		if err := npy.WriteFile(filepath.Join(dir, cf.NPY), c.Weights); err != nil {
			return nil, err
		}
		w := c.Weights.Float32s()
		size := l.sq * l.sk
		for b := 0; b < l.batch && size > 0; b++ {
			for h := 0; h < l.heads; h++ {
				off := (b*l.heads + h) * size
				mf := MapFile{Core: k, Batch: b, Head: h, Label: l.label(b, h), PNG: fmt.Sprintf("core%d_b%d_h%d.png", k, b, h)}
				hm := &HeatMap{Rows: l.sq, Cols: l.sk, Weights: w[off : off+size], Title: mapTitle(k, c, mf.Label)}
				if hidden != nil {
					hm.Masked = hidden[off : off+size]
				}
				jobs = append(jobs, job{filepath.Join(dir, mf.PNG), fmt.Sprintf("core %s, %s", c.Name, mf.Label), hm})
				cf.Maps = append(cf.Maps, mf)
			}
		}
		all = append(all, cf)
	}
	// Drawing dominates: one picture per CPU at a time.
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := writePNGFile(jobs[i].path, jobs[i].h); err != nil {
					errs[i] = fmt.Errorf("%s: %w", jobs[i].what, err)
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := writeIndex(filepath.Join(dir, "index.html"), title, all); err != nil {
		return nil, err
	}
	return all, nil
}

// mapTitle is a heat map's title: the core, its nodes, the matrix.
func mapTitle(k int, c CoreWeights, label string) string {
	t := fmt.Sprintf("core %d: %s", k, c.Name)
	if len(c.Ops) > 0 {
		t += "\n" + shorten(strings.Join(c.Ops, " → "), 70)
	}
	if label != "" {
		t += "\n" + label
	}
	return t
}

// shorten cuts s to at most n runes, marking the cut in the middle.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n/2-1]) + " … " + string(r[len(r)-(n/2-2):])
}

func writePNGFile(path string, h *HeatMap) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WritePNG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
