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
// erf.go, sigmoid.go; Silu is the Sigmoid op's then Mul's). The parallel
// forms cost a closure per call, 40 ns, which on a block's rows of 64
// columns was more than the kernel.
var fusedMatMulActivations = map[string]func(dst, src []float32){
	"Relu":     reluSerial,
	"Gelu":     func(dst, src []float32) { erfGeluSerial(dst, src, true) },
	"GeluTanh": func(dst, src []float32) { vecUnarySerial(dst, src, kernel.GeluTanh16) },
	"Silu":     siluSerial,
}

// siluSerial sets dst[i] = x·σ(x), x = src[i], as the unfused Sigmoid and
// Mul compute it: on AVX-512 kernel.Silu16 (the Sigmoid op's
// kernel.Sigmoid16, then one float32 multiply, in one pass), elsewhere the
// float64 sigmoid rounded to float32, as the op's generic path computes
// it, times x.
func siluSerial(dst, src []float32) {
	src = src[:len(dst)]
	if !kernel.AVX512 {
		for i, x := range src {
			dst[i] = x * float32(sigmoid(float64(x)))
		}
		return
	}
	vecUnarySerial(dst, src, kernel.Silu16)
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
	mul, add := float32VV(opMul), float32VV(opAdd) // Mul's and Add's own loops
	return func(i0, rows, j0, cols int) {
		for i := i0; i < i0+rows; i++ {
			lo, hi := i*nn+j0, i*nn+j0+cols
			seg := c[lo:hi]
			if act != nil {
				act(seg, seg)
			}
			if gate != nil {
				mul(seg, seg, gate[lo:hi])
			}
			if res != nil {
				add(seg, seg, res[lo:hi])
			}
		}
	}
}
