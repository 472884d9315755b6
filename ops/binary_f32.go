package ops

import (
	"fmt"

	"github.com/attnrun/attnrun/ops/internal/kernel"
)

// Float32 Add, Sub, Mul and Div: the AVX-512 kernels of package kernel
// (AddVV, AddVS, SubSV, …) where the CPU has them, elsewhere the generic Go
// loops of binary.go, on up to the context's threads for large outputs
// (applyBinaryThreads). The kernels give the Go loops' results bit for bit,
// NaN payloads included: x86 returns the first source's NaN when both
// operands are NaN, and each kernel keeps the operand Go's compiler puts
// first. Go does not specify which NaN a + b returns, and for + and · the
// choice is the register allocator's (Go 1.26: a[i] + b[i] gives a's NaN,
// a + b[i] gives b's); TestArithFloat32 compares the payloads with the Go
// loops, so a compiler that changes its choice shows there.

// arithFloat32 computes o = a op b for float32 tensors; o already has the
// broadcast shape.
func arithFloat32(op arithOp, o []float32, oShape []int, a []float32, aShape []int, b []float32, bShape []int, threads int) error {
	if op < 0 || int(op) >= len(arithGoLoops) {
		return fmt.Errorf("unknown arithmetic op %d", op)
	}
	if len(o) < arithKernelMin || !kernel.AVX512 && threads <= 1 {
		return applyBinary(o, oShape, a, aShape, b, bShape, arithGoLoops[op])
	}
	l := arithGoLoops[op]
	if kernel.AVX512 {
		l = arithKernels[op]
	}
	return applyBinaryThreads(threads, o, oShape, a, aShape, b, bShape, l)
}

// arithGoLoops and arithKernels hold each op's float32 loops, the generic
// Go loops and the AVX-512 kernels, in tables built once: a call allocates
// no closures.
var (
	arithGoLoops = arithLoops[float32]()
	arithKernels = [...]binLoops[float32, float32, float32]{
		// a + b[i] is b[i] + a: Go's compiler also puts b[i] first.
		opAdd: kernelLoops(kernel.AddVV, kernel.AddVS, swapVS(kernel.AddVS), &arithGoLoops[opAdd]),
		opSub: kernelLoops(kernel.SubVV, kernel.SubVS, kernel.SubSV, &arithGoLoops[opSub]),
		opMul: kernelLoops(kernel.MulVV, kernel.MulVS, swapVS(kernel.MulVS), &arithGoLoops[opMul]),
		opDiv: kernelLoops(kernel.DivVV, kernel.DivVS, kernel.DivSV, &arithGoLoops[opDiv]),
	}
)

// float32VV returns op's same-shape float32 loop, o[i] = a[i] op b[i]
// (o may be a): the kernel where the CPU has AVX-512, else the Go loop.
func float32VV(op arithOp) func(o, a, b []float32) {
	if kernel.AVX512 {
		return arithKernels[op].vv
	}
	return arithGoLoops[op].vv
}

// float32VS returns op's vector-by-scalar float32 loop, o[i] = a[i] op b
// (o may be a): the kernel where the CPU has AVX-512, else the Go loop.
func float32VS(op arithOp) func(o, a []float32, b float32) {
	if kernel.AVX512 {
		return arithKernels[op].vs
	}
	return arithGoLoops[op].vs
}

// arithKernelMin is the shortest run the kernels take; shorter ones (rows
// of a broadcast such as [4096, 3] + [3], tiny tensors) run the Go loops,
// which give the same bits without the calls into assembly.
const arithKernelMin = 16

// swapVS turns a commutative op's vector-scalar kernel into its
// scalar-vector kernel.
func swapVS(vs func(dst, a *float32, b float32, n int)) func(dst *float32, a float32, b *float32, n int) {
	return func(dst *float32, a float32, b *float32, n int) { vs(dst, b, a, n) }
}

// kernelLoops wraps pointer-and-length kernels as binLoops, with the Go
// loops short for runs shorter than arithKernelMin.
func kernelLoops(
	vv func(dst, a, b *float32, n int),
	vs func(dst, a *float32, b float32, n int),
	sv func(dst *float32, a float32, b *float32, n int),
	short *binLoops[float32, float32, float32],
) binLoops[float32, float32, float32] {
	return binLoops[float32, float32, float32]{
		vv: func(o, a, b []float32) {
			if len(o) > 0 {
				vv(&o[0], &a[:len(o)][0], &b[:len(o)][0], len(o))
			}
		},
		vs: func(o, a []float32, b float32) {
			if len(o) > 0 {
				vs(&o[0], &a[:len(o)][0], b, len(o))
			}
		},
		sv: func(o []float32, a float32, b []float32) {
			if len(o) > 0 {
				sv(&o[0], a, &b[:len(o)][0], len(o))
			}
		},
		short:    short,
		shortRun: arithKernelMin,
	}
}
