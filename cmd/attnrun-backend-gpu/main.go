// Command attnrun-backend-gpu is attnrun's CUDA backend plugin. Put it in
// the plugin directory (--plugin-dir or ATTNRUN_PLUGIN_DIR) and run models
// with `attnrun run --backend gpu`. It needs no CUDA at build time: the
// driver, cuBLAS and NVRTC are loaded when it starts, and without them it
// reports itself unavailable, with the reason, to `attnrun backends`.
//
// `attnrun-backend-gpu --probe` prints what it finds and exits 0 when the
// GPU is usable, 1 otherwise.
package main

import "github.com/attnrun/attnrun/backends/gpu"

func main() { gpu.Main() }
