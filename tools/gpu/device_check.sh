#!/bin/sh
# Runs on the GPU machine, from the repository root, with bin/ built on any
# machine (no CUDA needed to build):
#
#   go build -o bin/ ./cmd/...            # bin/attnrun and bin/attnrun-backend-gpu
#   # copy bin/, models/, tools/gpu/ to the GPU machine, then there:
#   sh tools/gpu/device_check.sh [OUT_DIR]
#
# Steps (each one's output goes to OUT_DIR, default ./gpu-check):
#   1. attnrun-backend-gpu --probe    driver, device, NVRTC compile of the kernels, cuBLAS
#   2. attnrun backends               the host sees the plugin as available
#   3. attnrun conform --backend gpu --no-fallback models/   (fused; then --no-fuse)
#      at the default tolerance rtol 1e-4, atol 1e-5, then with ATTNRUN_GPU_SYNC=1
#      if it failed (names the failing node)
#   4. if PyTorch with CUDA is importable: tools/gpu/bench_torch.py (eager and
#      SDPA baselines) and `attnrun bench --backend gpu` on the same weights
#      at batch 8, S = 512, 2048, 8192 (BENCH_SEQS to change)
set -u
OUT=${1:-gpu-check}
mkdir -p "$OUT"
BIN=${BIN:-bin}
SEQS=${BENCH_SEQS:-512 2048 8192}
ITERS=${BENCH_ITERS:-20}
export ATTNRUN_PLUGIN_DIR=$(cd "$BIN" && pwd)
status=0

echo "== probe"
"$BIN/attnrun-backend-gpu" --probe | tee "$OUT/probe.txt" || { echo "GPU backend unavailable: see $OUT/probe.txt"; exit 1; }

echo "== backends"
"$BIN/attnrun" backends | tee "$OUT/backends.txt"

for fuse in "" "--no-fuse"; do
	name=conform${fuse:+-nofuse}
	echo "== conform $fuse"
	if ! "$BIN/attnrun" conform --backend gpu --no-fallback $fuse models/ >"$OUT/$name.txt" 2>&1; then
		status=1
		echo "conform $fuse FAILED; rerunning with ATTNRUN_GPU_SYNC=1"
		ATTNRUN_GPU_SYNC=1 "$BIN/attnrun" conform --backend gpu --no-fallback $fuse models/ >"$OUT/$name-sync.txt" 2>&1
	fi
	tail -5 "$OUT/$name.txt"
done

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "== PyTorch baseline"
	python3 tools/gpu/bench_torch.py --seqs "$(echo $SEQS | tr ' ' ,)" --iters "$ITERS" --onnx "$OUT/bench-models" \
		--json "$OUT/torch.json" | tee "$OUT/torch.txt"
	model="$OUT/bench-models/s000_multi_head_c768/model.onnx"
	for s in $SEQS; do
		echo "== attnrun bench gpu S=$s"
		"$BIN/attnrun" bench --backend gpu --no-fallback "$model" -i "x=random:8x${s}x768" \
			--iters "$ITERS" --warmup 3 --json >"$OUT/attnrun-gpu-s$s.txt" 2>&1 || status=1
		tail -1 "$OUT/attnrun-gpu-s$s.txt"
		ATTNRUN_GPU_TF32=1 "$BIN/attnrun" bench --backend gpu --no-fallback "$model" -i "x=random:8x${s}x768" \
			--iters "$ITERS" --warmup 3 --json >"$OUT/attnrun-gpu-tf32-s$s.txt" 2>&1 || status=1
	done
else
	echo "== PyTorch with CUDA not importable: benchmarks skipped"
fi
exit $status
