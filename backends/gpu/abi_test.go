package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnrun/attnrun/ir"
)

// paramSample is one parameter struct as the Go side writes it.
type paramSample struct {
	name string
	pb   *paramBuilder
}

// sampleParams builds every parameter struct once, in kernels.cu's order.
func sampleParams() []paramSample {
	return []paramSample{
		{"PBinary", binaryParams(binAdd, 1, "o", "a", "b", []int{1}, []int{1}, []int{1})},
		{"PUnary", unaryParams(unSqrt, 1, "o", "x")},
		{"PCast", castParams(1, ir.Float, ir.Int64, "o", "x")},
		{"PWhere", whereParams(1, "o", "c", "x", "y", []int{1}, []int{1}, []int{1}, []int{1})},
		{"PCopy", copyParams(1, "o", 0, "x", 0, []int{1}, []int{1}, []int{1})},
		{"PGather", gatherParams(1, "o", "d", "i", true, 1, 1, 1, 1, errFlagVal)},
		{"PFill", fillParams(1, "o", 0)},
		{"PSoftmax", softmaxParams("o", "x", 1, 1, 1)},
		{"PLayerNorm", layerNormParams("o", "x", "s", "b", "", "", 1, 1, 1, 1, 1e-5)},
		{"PAttn", attnParams(attnArgs{out: "o", q: "q", k: "k", v: "v", sq: 1, sk: 1, d: 1, dv: 1, batches: 1})},
		{"PRMSNorm", rmsNormParams("o", "x", "s", 1, 1, 1, 1e-5)},
		{"PRotary", rotaryParams(rotaryArgs{out: "o", in: "x", cos: "c", sin: "s", err: errFlagVal, n: 1, s: 1, h: 1, d: 2, rd: 2})},
		{"PTrilu", triluParams(1, 1, 1, 0, true, "o", "x")},
	}
}

// kernelStruct names the parameter struct a kernel takes.
func kernelStruct(kernel string) string {
	prefix, _, _ := strings.Cut(kernel, "_")
	return map[string]string{
		"binary": "PBinary", "unary": "PUnary", "cast": "PCast", "where": "PWhere", "copy": "PCopy",
		"gather": "PGather", "fill": "PFill", "softmax": "PSoftmax", "layernorm": "PLayerNorm",
		"attention": "PAttn", "trilu": "PTrilu", "rmsnorm": "PRMSNorm", "rotary": "PRotary",
	}[prefix]
}

// TestKernelSourceABI compiles kernels.cu with g++ (-fsyntax-only) under
// testdata/cuda_shim.h and checks, with static_assert, that every
// parameter struct has exactly the members the Go constructors write, at
// offset 8*i, that the op codes agree, and that every kernel in kernelNames
// is defined. NVRTC compiles the same source on the GPU machine; this
// catches syntax errors and Go/C layout drift without one.
func TestKernelSourceABI(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not installed")
	}
	structs := sampleParams()
	var b strings.Builder
	b.WriteString("#include \"cuda_shim.h\"\n#include \"../kernels.cu\"\n")
	for _, s := range structs {
		for i, f := range s.pb.fields {
			fmt.Fprintf(&b, "static_assert(offsetof(%s, %s) == %d, \"%s.%s is not at %d\");\n", s.name, f.name, 8*i, s.name, f.name, 8*i)
		}
		n := len(s.pb.fields)
		fmt.Fprintf(&b, "static_assert(sizeof(%s) == %d, \"%s has members the Go side does not write (want %d)\");\n", s.name, 8*n, s.name, 8*n)
	}
	consts := map[string]int{
		"MAXR": maxRank, "OP_ADD": binAdd, "OP_SUB": binSub, "OP_MUL": binMul, "OP_DIV": binDiv, "OP_POW": binPow,
		"OP_AND": binAnd, "OP_OR": binOr, "OP_XOR": binXor, "OP_EQ": binEq, "OP_LT": binLt, "OP_GT": binGt,
		"OP_LE": binLe, "OP_GE": binGe, "UN_SQRT": unSqrt, "UN_ERF": unErf, "UN_NEG": unNeg, "UN_EXP": unExp,
		"UN_TANH": unTanh, "UN_RELU": unRelu, "UN_ABS": unAbs, "UN_RECIP": unRecip, "UN_SIGMOID": unSigmoid,
		"UN_LOG": unLog, "UN_NOT": unNot, "MASK_NONE": maskNone, "MASK_BOOL_TRUE": maskBoolTrue,
		"MASK_BOOL_FALSE": maskBoolFalse, "MASK_ADD": maskAdditive, "SC_NONE": scoresNone, "SC_RAW": scoresRaw,
		"SC_SOFTCAPPED": scoresSoftcapped, "SC_BIASED": scoresBiased, "SC_WEIGHTS": scoresWeights, "AT_WARPS": attnWarps, "AT_ROWS": attnRows,
		"AT_BK": attnBK, "AT_MAXD": attnMaxD, "DT_F32": int(ir.Float), "DT_I64": int(ir.Int64),
		"DT_I32": int(ir.Int32), "DT_BOOL": int(ir.Bool), "DT_U8": int(ir.Uint8), "DT_F64": int(ir.Double),
	}
	for name, v := range consts {
		fmt.Fprintf(&b, "static_assert(%s == %d, \"%s differs from the Go constant %d\");\n", name, v, name, v)
	}
	for _, k := range kernelNames {
		fmt.Fprintf(&b, "static void* const check_%s = (void*)&%s;\n", k, k)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "abi.cpp")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	// The include of ../kernels.cu is resolved relative to testdata.
	cmd := exec.Command(gxx, "-std=c++14", "-fsyntax-only", "-Werror=return-type", "-I", abs, "-x", "c++", src)
	cmd.Dir = abs
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++ rejects kernels.cu or its ABI: %v\n%s", err, out)
	}
}
