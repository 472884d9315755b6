# Helpers for scripts/serve-load.sh and scripts/serve-fault.sh (sourced
# from the repository root). Sets up: WORK (a scratch directory removed on
# exit, with the server stopped), GHZ, LOADTOOL, MHA (the C=768 export).
ATTNRUN=${ATTNRUN:-bin/attnrun}
BENCH_MODELS=${BENCH_MODELS:-bench/models}
CONCURRENCY=${CONCURRENCY:-16}
THREADS=${THREADS:-2}
MAX_BATCH=${MAX_BATCH:-16}
MAX_DELAY=${MAX_DELAY:-2ms}
WORK=$(mktemp -d)
SERVER_PID=
ALL_PIDS=()
# OUT=DIR keeps the ghz reports and server logs.
trap 'stop_all; if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; cp "$WORK"/*.json "$WORK"/*.log "$OUT"/ 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
MHA=$BENCH_MODELS/s000_multi_head_c768/model.onnx

# ghz: the pinned load generator for gRPC.
GHZ_VERSION=v0.120.0
ghz_bin() {
	if command -v ghz >/dev/null; then
		command -v ghz
	elif [ -x "$(go env GOPATH)/bin/ghz" ]; then
		echo "$(go env GOPATH)/bin/ghz"
	else
		echo "installing ghz $GHZ_VERSION" >&2
		GOFLAGS= go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" >&2
		echo "$(go env GOPATH)/bin/ghz"
	fi
}

# start_server NAME ARGS...: starts `attnrun serve ARGS` on free loopback
# ports and sets SERVER_PID, HTTP_ADDR, GRPC_ADDR, METRICS_ADDR.
start_server() {
	local name=$1
	shift
	local log="$WORK/$name.log"
	"$ATTNRUN" serve --http 127.0.0.1:0 --grpc 127.0.0.1:0 --metrics 127.0.0.1:0 "$@" 2>"$log" &
	SERVER_PID=$!
	ALL_PIDS+=("$SERVER_PID")
	local line=""
	for _ in $(seq 300); do
		line=$(grep -m1 'msg=serving' "$log" || true)
		[ -n "$line" ] && break
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			echo "attnrun serve exited:" >&2
			cat "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	[ -n "$line" ] || { echo "attnrun serve did not start" >&2; return 1; }
	HTTP_ADDR=$(sed -E 's/.* http=([^ ]+).*/\1/' <<<"$line")
	GRPC_ADDR=$(sed -E 's/.* grpc=([^ ]+).*/\1/' <<<"$line")
	METRICS_ADDR=$(sed -E 's/.* metrics=([^ ]+).*/\1/' <<<"$line")
}

# stop_server [PID]: SIGTERM, then wait (the server drains and exits).
stop_server() {
	local pid=${1:-${SERVER_PID:-}}
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || true
	fi
}

stop_all() {
	for pid in "${ALL_PIDS[@]}"; do
		stop_server "$pid"
	done
}

# backend_pids: the server's backend processes (its children).
backend_pids() {
	cat /proc/"$SERVER_PID"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$' || true
}

# ghz_run OUT ADDR ARGS...: ghz against ModelInfer with KServe's proto; the
# JSON report (with per-request details) goes to OUT.
ghz_run() {
	local out=$1 addr=$2
	shift 2
	echo "+ ghz --insecure --proto serve/proto/grpc_predict_v2.proto --call inference.GRPCInferenceService/ModelInfer $* $addr" >&2
	"$GHZ" --insecure --proto serve/proto/grpc_predict_v2.proto \
		--call inference.GRPCInferenceService/ModelInfer \
		--format json --output "$out" "$@" "$addr"
}

# bench_p50 JSON: the p50_ms of `attnrun bench --json`'s last line.
bench_p50() {
	tail -1 "$1" | sed -E 's/.*"p50_ms":([0-9.eE+-]+).*/\1/'
}

# metric NAME [ADDR]: the sum of a metric's samples on a server's /metrics
# (the last started server's by default).
metric() {
	curl -s "http://${2:-$METRICS_ADDR}/metrics" | awk -v n="$1" '$1 ~ "^"n"({|$)" { s += $2 } END { print s + 0 }'
}

GHZ=$(ghz_bin)
go build -o "$WORK/loadtool" ./serve/loadtool
LOADTOOL=$WORK/loadtool
[ -f "$MHA" ] || { echo "no $MHA: run make bench-models (needs PyTorch)" >&2; exit 1; }
