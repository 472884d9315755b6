#!/usr/bin/env bash
# make serve-load: load tests of `attnrun serve` with real clients, for the
# targets of issue 11. Prints each measurement and the command behind it.
#   1. s003 tiny model, gRPC, concurrency 1: ghz's p50 minus the library's
#      Run p50 (`attnrun bench --fresh-outputs`, same input and threads).
#   2. s000 MultiHeadAttention C=768, S=128, ghz at concurrency 16 for
#      $DURATION per mode: errors and throughput with dynamic batching off
#      and on (two servers, the load alternating between them in $ROUNDS
#      segments each, so that the shared machine's other load hits both).
#      Then the model's time per row at batch 1, 8 and 16 (attnrun bench):
#      whether stacking requests can pay at all on this machine.
#   2b. where batching pays: the small s000 MultiHeadAttention (C=32) at
#      S=8, batching off and on, the same way for $SMALL_DURATION per mode.
#   Every ghz run also reports the CPU per request of the server, its
#   backends and ghz itself (ghz_run in scripts/serve-lib.sh).
#   3. the same model over HTTP with wrk (binary tensor data extension).
# Needs: bin/attnrun (make build), the C=768 export (make bench-models),
# ghz (installed here at a pinned version if missing) and wrk (Debian: apt-get
# install wrk; skipped with a note if absent). The machine is shared: read
# ratios within one run, not absolute numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-60s}
HTTP_DURATION=${HTTP_DURATION:-20s}
TINY_REQUESTS=${TINY_REQUESTS:-3000}
ROUNDS=${ROUNDS:-6}
SMALL_DURATION=${SMALL_DURATION:-30s}
BENCH_ITERS=${BENCH_ITERS:-20}
source scripts/serve-lib.sh
TINY=models/s003_self_attention/model.onnx

# alternate NAME SEGMENT: ROUNDS rounds of ghz at CONCURRENCY against the
# servers grpc[off] and grpc[on], SEGMENT seconds each, in alternating
# order so that the machine's other load falls on both alike, with the
# request NAME.bin; reports go to NAME-MODE-ROUND.json. Then the requests
# per model run of each server.
alternate() {
	local name=$1 segment=$2
	for r in $(seq "$ROUNDS"); do
		order="off on"
		[ $((r % 2)) = 0 ] && order="on off"
		for mode in $order; do
			ghz_run "$WORK/$name-$mode-$r.json" "${grpc[$mode]}" --binary-file "$WORK/$name.bin" -c "$CONCURRENCY" -z "${segment}s" --duration-stop wait 2>/dev/null
			echo "round $r, batching $mode: $("$LOADTOOL" ghz-report "$WORK/$name-$mode-$r.json" | tail -1)"
			echo "  $(cat "$WORK/$name-$mode-$r.json.cpu")"
		done
	done
	for mode in off on; do
		echo "batching $mode: requests per model run (attnrun_batch_size) $(awk -v s="$(metric attnrun_batch_size_sum "${metrics[$mode]}")" -v c="$(metric attnrun_batch_size_count "${metrics[$mode]}")" 'BEGIN { printf "%.2f", s / c }')"
	done
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load average $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "## 1. s003 tiny model, gRPC, concurrency 1 (x: 8x32, 1 thread)"
"$LOADTOOL" request --model "$TINY" --name tiny --dim seq=8 --grpc "$WORK/tiny.bin"
echo "+ attnrun bench $TINY -i x=random:8x32 --threads 1 --iters $TINY_REQUESTS --warmup 200 --fresh-outputs --json" >&2
"$ATTNRUN" bench "$TINY" -i x=random:8x32 --threads 1 --iters "$TINY_REQUESTS" --warmup 200 --fresh-outputs --json >"$WORK/bench.json" 2>/dev/null
lib=$(bench_p50 "$WORK/bench.json")
start_server tiny --model tiny="$TINY" --threads 1
ghz_run "$WORK/tiny-warm.json" "$GRPC_ADDR" --binary-file "$WORK/tiny.bin" -c 1 -n 200
ghz_run "$WORK/tiny.json" "$GRPC_ADDR" --binary-file "$WORK/tiny.bin" -c 1 -n "$TINY_REQUESTS"
stop_server
"$LOADTOOL" ghz-report "$WORK/tiny.json"
cat "$WORK/tiny.json.cpu"
srv=$("$LOADTOOL" ghz-report "$WORK/tiny.json" | sed -nE 's/^p50_ms=([0-9.]+).*/\1/p')
awk -v s="$srv" -v l="$lib" 'BEGIN { printf "s003: server p50 %.3f ms (ghz), library Run p50 %.3f ms (attnrun bench): difference %.3f ms (target <= 0.15)\n", s, l, s - l }'

echo
SEGMENT=$((${DURATION%s} / ROUNDS))
echo "## 2. s000 MultiHeadAttention C=768, S=128, gRPC, concurrency $CONCURRENCY, $THREADS threads: $DURATION per mode in $ROUNDS alternating segments of ${SEGMENT}s"
"$LOADTOOL" request --model "$MHA" --name mha --dim batch=1 --dim seq=128 --grpc "$WORK/mha.bin" --http "$WORK/mha.http"
declare -A grpc http metrics
for mode in off on; do
	args=(--model mha="$MHA" --threads "$THREADS")
	[ "$mode" = on ] && args+=(--max-batch-size "$MAX_BATCH" --max-queue-delay "$MAX_DELAY")
	echo "dynamic batching $mode: attnrun serve ${args[*]}"
	start_server "mha-$mode" "${args[@]}"
	grpc[$mode]=$GRPC_ADDR http[$mode]=$HTTP_ADDR metrics[$mode]=$METRICS_ADDR
	ghz_run "$WORK/mha-$mode-warm.json" "$GRPC_ADDR" --binary-file "$WORK/mha.bin" -c "$CONCURRENCY" -n 200 2>/dev/null
done
# Both servers stay up while the load alternates between them.
alternate mha "$SEGMENT"
for mode in off on; do
	echo "### batching $mode, all rounds"
	"$LOADTOOL" ghz-report "$WORK"/mha-$mode-[0-9]*.json
done
on=$("$LOADTOOL" ghz-report "$WORK"/mha-on-[0-9]*.json | sed -nE 's/.* rps=([0-9.]+).*/\1/p')
off=$("$LOADTOOL" ghz-report "$WORK"/mha-off-[0-9]*.json | sed -nE 's/.* rps=([0-9.]+).*/\1/p')
awk -v on="$on" -v off="$off" 'BEGIN { printf "s000 C=768 S=128 over gRPC: %.1f requests/s with dynamic batching, %.1f without: %.2fx (target >= 1.5x)\n", on, off, on / off }'
# Whether batching can pay at all: the model's own time per row at batch 1
# and at the batch sizes it forms, in the library, with the server's threads.
for b in 1 8 16; do
	echo "+ attnrun bench $MHA -i x=random:${b}x128x768 --threads $THREADS --iters $BENCH_ITERS --warmup 3 --json" >&2
	"$ATTNRUN" bench "$MHA" -i x=random:${b}x128x768 --threads "$THREADS" --iters "$BENCH_ITERS" --warmup 3 --json >"$WORK/rows-$b.json" 2>/dev/null
	awk -v b="$b" -v p="$(bench_p50 "$WORK/rows-$b.json")" 'BEGIN { printf "attnrun bench C=768 S=128, batch %d: p50 %.2f ms per run, %.3f ms per row\n", b, p, p / b }'
done

echo
echo "## 2b. where dynamic batching pays: s000 MultiHeadAttention C=32 (models/s000_multi_head), S=8 (x: 1x8x32), gRPC, concurrency $CONCURRENCY, $THREADS threads: $SMALL_DURATION per mode in $ROUNDS alternating segments"
SMALL=models/s000_multi_head/model.onnx
"$LOADTOOL" request --model "$SMALL" --name small --dim seq=8 --dim batch=1 --grpc "$WORK/small.bin"
for mode in off on; do
	args=(--model small="$SMALL" --threads "$THREADS")
	[ "$mode" = on ] && args+=(--max-batch-size "$MAX_BATCH" --max-queue-delay "$MAX_DELAY")
	echo "dynamic batching $mode: attnrun serve ${args[*]}"
	start_server "small-$mode" "${args[@]}"
	grpc[$mode]=$GRPC_ADDR metrics[$mode]=$METRICS_ADDR
	ghz_run "$WORK/small-$mode-warm.json" "$GRPC_ADDR" --binary-file "$WORK/small.bin" -c "$CONCURRENCY" -n 500 2>/dev/null
done
alternate small $((${SMALL_DURATION%s} / ROUNDS))
on=$("$LOADTOOL" ghz-report "$WORK"/small-on-[0-9]*.json | sed -nE 's/.* rps=([0-9.]+).*/\1/p')
off=$("$LOADTOOL" ghz-report "$WORK"/small-off-[0-9]*.json | sed -nE 's/.* rps=([0-9.]+).*/\1/p')
awk -v on="$on" -v off="$off" -v c="$CONCURRENCY" 'BEGIN { printf "s000 C=32 S=8 over gRPC, concurrency %d: %.1f requests/s with dynamic batching, %.1f without: %.2fx\n", c, on, off, on / off }'
for mode in off on; do
	stop_server "${SERVER_AT[${grpc[$mode]}]}"
done

echo
echo "## 3. the same over HTTP (binary tensor data extension), wrk -t2 -c$CONCURRENCY -d$HTTP_DURATION per mode"
if command -v wrk >/dev/null; then
	cat >"$WORK/post.lua" <<'LUA'
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = os.getenv("HEADER_LEN")
LUA
	for mode in off on; do
		echo "### batching $mode"
		echo "+ wrk -t2 -c$CONCURRENCY -d$HTTP_DURATION --latency -s post.lua http://${http[$mode]}/v2/models/mha/infer" >&2
		BODY="$WORK/mha.http" HEADER_LEN=$(cat "$WORK/mha.http.len") \
			wrk -t2 -c"$CONCURRENCY" -d"$HTTP_DURATION" --latency -s "$WORK/post.lua" "http://${http[$mode]}/v2/models/mha/infer"
	done
else
	echo "wrk is not installed (apt-get install wrk): skipped"
fi
