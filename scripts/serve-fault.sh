#!/usr/bin/env bash
# make serve-fault: kill -9 a backend of `attnrun serve` in the middle of a
# ghz load and count what the clients saw: the target is no hung request,
# every failure a clear UNAVAILABLE naming the backend, and throughput back
# to normal within 2 s. The server runs the load script's batching config
# (s000 MultiHeadAttention C=768, S=128, concurrency 16).
# Needs what scripts/serve-load.sh needs (ghz; the C=768 export).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-30s}
KILL_AFTER=${KILL_AFTER:-10}
INSTANCES=${INSTANCES:-1}
source scripts/serve-lib.sh
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$LOADTOOL" request --model "$MHA" --name mha --dim batch=1 --dim seq=128 --grpc "$WORK/mha.bin"
args=(--model mha="$MHA" --threads "$THREADS" --instances "$INSTANCES" --max-batch-size "$MAX_BATCH" --max-queue-delay "$MAX_DELAY")
echo "attnrun serve ${args[*]}"
start_server fault "${args[@]}"
before=$(backend_pids | xargs)
echo "backends: $before"
ghz_run "$WORK/warm.json" "$GRPC_ADDR" --binary-file "$WORK/mha.bin" -c "$CONCURRENCY" -n 200
ghz_run "$WORK/fault.json" "$GRPC_ADDR" --binary-file "$WORK/mha.bin" -c "$CONCURRENCY" -z "$DURATION" --duration-stop wait --timeout 10s &
ghz_pid=$!
sleep "$KILL_AFTER"
victim=$(backend_pids | head -1)
kill_ns=$(date +%s%N)
kill -9 "$victim"
echo "kill -9 $victim (backend) at $kill_ns"
wait "$ghz_pid"
echo "backend restarts counted: $(metric attnrun_backend_restarts_total)"
echo "backends after: $(backend_pids | xargs)"
stop_server
echo "server log lines about the death:"
grep -E 'backend died|restart' "$WORK/fault.log" | head -5 || true
"$LOADTOOL" ghz-report --kill "$kill_ns" "$WORK/fault.json"
