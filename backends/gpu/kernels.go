package gpu

import _ "embed"

// kernelSource is the CUDA C++ source of every kernel, compiled by NVRTC
// when the backend starts.
//
//go:embed kernels.cu
var kernelSource string

// kernelNames are the extern "C" kernels the backend loads from the module.
var kernelNames = []string{
	"binary_f32", "binary_i64", "binary_i32", "binary_u8",
	"unary_f32", "unary_i64", "unary_u8", "cast_any",
	"where_1", "where_4", "where_8",
	"copy_1", "copy_4", "copy_8",
	"gather_1", "gather_4", "gather_8",
	"fill_1", "fill_4", "fill_8", "trilu_1", "trilu_4", "trilu_8",
	"softmax_f32", "layernorm_f32", "attention_f32", "rmsnorm_f32", "rotary_f32",
}

// deviceConfig selects and configures the GPU.
type deviceConfig struct {
	ordinal int
	tf32    bool
	// libDirs are searched for the CUDA libraries before the loader's path.
	libDirs []string
}
