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
# SERVER_AT[grpc address] is the pid of the server listening there.
declare -A SERVER_AT
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
	SERVER_AT[$GRPC_ADDR]=$SERVER_PID
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

# backend_pids [PID]: a server's backend processes (its children; the last
# started server's by default).
backend_pids() {
	cat /proc/"${1:-$SERVER_PID}"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$' || true
}

# cpu_seconds PID...: the user + system CPU seconds the processes have used
# (each by itself, not its children).
cpu_seconds() {
	local hz
	hz=$(getconf CLK_TCK)
	for pid in "$@"; do
		# Fields 14 and 15 (utime, stime), counted after the ") " that ends
		# the command name.
		sed -E 's/.*\) //' /proc/"$pid"/stat 2>/dev/null || true
	done | awk -v hz="$hz" '{ s += $12 + $13 } END { printf "%.3f", s / hz }'
}

# ghz_run OUT ADDR ARGS...: ghz against ModelInfer with KServe's proto; the
# JSON report (with per-request details) goes to OUT, and OUT.cpu gets the
# CPU time per request of the server process (its own work: decoding,
# queueing, the backend calls, encoding), of its backend processes (the
# model's compute) and of ghz itself, which shares the machine.
ghz_run() {
	local out=$1 addr=$2
	shift 2
	local server=${SERVER_AT[$addr]:-}
	local backends s0 b0 s1 b1 t0 t1
	backends=$(backend_pids "$server" | xargs)
	s0=$(cpu_seconds "$server")
	b0=$(cpu_seconds $backends)
	echo "+ ghz --insecure --proto serve/proto/grpc_predict_v2.proto --call inference.GRPCInferenceService/ModelInfer $* $addr" >&2
	t0=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
	"$GHZ" --insecure --proto serve/proto/grpc_predict_v2.proto \
		--call inference.GRPCInferenceService/ModelInfer \
		--format json --output "$out" "$@" "$addr"
	# ghz's CPU: this shell's waited-for children's time grew by it.
	t1=$(awk '{ print $14 + $15 + $16 + $17 }' /proc/$$/stat)
	s1=$(cpu_seconds "$server")
	b1=$(cpu_seconds $backends)
	local n
	# ghz's JSON report: the first "count" is the top-level number of requests.
	n=$(grep -o '"count":[0-9]*' "$out" | head -1 | cut -d: -f2)
	awk -v n="$n" -v s="$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" -v b="$(awk -v a="$b0" -v b="$b1" 'BEGIN { print b - a }')" \
		-v g="$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { print (b - a) / hz }')" \
		'BEGIN { if (n > 0) printf "cpu per request (%d requests): server %.3f ms, backends %.3f ms, ghz %.3f ms\n", n, 1000 * s / n, 1000 * b / n, 1000 * g / n }' >"$out.cpu"
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
