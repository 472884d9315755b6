package ops

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/ops/blas"
	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// FusedMatMul's epilogue (com.attnrun:FusedMatMul, opset 1): what the GEMM
// does to each block of the output once its product and bias are final,
// while the block is still in cache (blas.Epilogue), instead of a pass of
// its own over the whole output afterwards:
//
//	y = (activation(A·B + bias) ⊙ gate) + residual
//
// Attribute activation (string, optional) is "Relu", "Gelu" (exact),
// "GeluTanh" (Gelu with approximate "tanh"; AVX-512 only) or "Silu"
// (x·Sigmoid(x), what PyTorch's SiLU exports as: a Sigmoid and a Mul).
// Input 3, residual (optional; a transformer's skip connection), and
// input 4, gate (optional; the other half of a gated MLP, LLaMA's
// w2(silu(w1·x) ⊙ w3·x)), are float32 tensors holding the output's
// elements row-major: the output's shape, or another with the same count
// and last dim (the skip connection of a Linear whose output is reshaped
// before the Add). The gate multiplies the activation's result; the
// residual is added last. All compute exactly what the ops they replace
// compute: the same float32 kernels on the same values, element by
// element (the activation's kernel is its op's, run on the block; Silu is
// the Sigmoid op's kernel then Mul's product; the gate multiplies as Mul
// does and the residual adds as Add does), so a fused and an unfused run
// agree bit for bit.

// fusedMatMulActivations maps the FusedMatMul activation attribute's values
// to the float32 kernels the epilogue runs, on the calling goroutine (the
// GEMM's worker): each is the serial form of its ONNX op's own (unary.go,
// erf.go, sigmoid.go; Silu is the Sigmoid op's then Mul's). The parallel forms cost a closure per call, 40 ns,
// which on a block's rows of 64 columns was more than the kernel.
var fusedMatMulActivations = map[string]func(dst, src []float32){
	"Relu":     reluSerial,
	"Gelu":     func(dst, src []float32) { erfGeluSerial(dst, src, true) },
	"GeluTanh": func(dst, src []float32) { vecUnarySerial(dst, src, kernel.GeluTanh16) },
	"Silu":     siluSerial,
}

// siluChunk is how many sigmoids siluSerial holds on the stack at a time
// (a multiple of 16: each goes through Sigmoid16 as the op's would).
const siluChunk = 256

// siluSerial sets dst[i] = src[i]·σ(src[i]) as the unfused Sigmoid and Mul
// compute it: σ by the Sigmoid op's float32 kernel (sigmoidSerial), then
// Mul's float32 product of the two.
func siluSerial(dst, src []float32) {
	var sig [siluChunk]float32
	for lo := 0; lo < len(dst); lo += siluChunk {
		hi := min(len(dst), lo+siluChunk)
		s := sig[:hi-lo]
		sigmoidSerial(s, src[lo:hi])
		mulVV(dst[lo:hi], src[lo:hi], s)
	}
}

// FusedMatMulActivation returns the value of FusedMatMul's activation
// attribute that computes the float32 elementwise node n (an ONNX Relu, or
// Gelu with approximate "none" or "tanh"), and ok false when the epilogue
// has no kernel for it (another op, or Gelu's tanh form without AVX-512,
// whose op then runs the float64 reference). Silu is no single node
// attnrun runs (ONNX's Swish, opset 24, x·σ(alpha·x), is not registered;
// HardSwish is another function): the graph rewrite matches its Sigmoid
// and Mul.
func FusedMatMulActivation(n *ir.Node) (activation string, ok bool) {
	if n.Domain != "" && n.Domain != DomainONNX {
		return "", false
	}
	switch n.OpType {
	case "Relu":
		return "Relu", true
	case "Gelu":
		mode, err := n.AttrString("approximate", "none")
		switch {
		case err != nil:
			return "", false
		case mode == "none":
			return "Gelu", true
		case mode == "tanh" && kernel.AVX512:
			return "GeluTanh", true
		}
	}
	return "", false
}

// fusedMatMulActivation reads n's activation attribute: nil when absent.
func fusedMatMulActivation(n *ir.Node) (func(dst, src []float32), error) {
	name, err := n.AttrString("activation", "")
	if err != nil || name == "" {
		return nil, err
	}
	act := fusedMatMulActivations[name]
	if act == nil || (name == "GeluTanh" && !kernel.AVX512) {
		return nil, n.Errorf("activation %q is not one of Relu, Gelu, GeluTanh and Silu (GeluTanh needs AVX-512)", name)
	}
	return act, nil
}

// epilogue returns the blas.Epilogue that finishes the rows of c (p.n
// columns, row-major) with p's activation, then multiplies by gate and
// adds res (the gate's and residual's rows that c's are; nil for none),
// nil when there is nothing to do.
func (p *fusedMatMulPlan) epilogue(c, gate, res []float32) blas.Epilogue {
	if p.act == nil && gate == nil && res == nil {
		return nil
	}
	nn, act := p.n, p.act
	return func(i0, rows, j0, cols int) {
		for i := i0; i < i0+rows; i++ {
			lo, hi := i*nn+j0, i*nn+j0+cols
			seg := c[lo:hi]
			if act != nil {
				act(seg, seg)
			}
			if gate != nil {
				mulVV(seg, seg, gate[lo:hi])
			}
			if res != nil {
				addTo(seg, res[lo:hi])
			}
		}
	}
}

// addTo sets dst[i] += src[i], with AVX-512 where the CPU has it.
func addTo(dst, src []float32) {
	src = src[:len(dst)]
	lo := 0
	if v := len(dst) / 16 * 16; kernel.AVX512 && v > 0 {
		kernel.AddTo16(&dst[0], &src[0], v)
		lo = v
	}
	for i := lo; i < len(dst); i++ {
		dst[i] += src[i]
	}
}
