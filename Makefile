# attnrun's make targets. The two that set up a fresh machine (see README):
#   make demo   build attnrun and run every bundled model through the CPU backend
#   make test   install test dependencies, then format-, tidy- and vet-check and test everything
.PHONY: demo test build test-deps

build:
	go build -o bin/attnrun ./cmd/attnrun

demo: build
	./bin/attnrun conform models/

test-deps:
	./scripts/install-test-deps.sh

test: test-deps
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go mod tidy -diff
	go vet ./...
	go build ./...
	go test -count=1 ./...
	go test -count=1 -tags openblas ./ops/blas/

# soak: the chaos soak test (not part of make test; a few minutes): random seed models and shapes
# from many goroutines while backends are SIGKILLed and SIGSTOPped and contexts cancelled; fails on
# any wrong answer, hung call, unexpected error, or growth of fds, processes, temp dirs or RSS > 10%.
# SOAK_FLAGS passes more flags to tools/soak (-goroutines, -models, -seed, -warmup, -calm; see its doc).
.PHONY: soak
SOAK_DURATION ?= 2m
SOAK_FLAGS ?=
soak:
	go run ./tools/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

.PHONY: models

# Regenerate the reference ONNX models and test data in models/ (committed;
# CI does not need this). Needs Debian's PyTorch/ONNX for the system Python:
#   apt-get install python3-torch python3-onnx python3-numpy
# Large benchmark exports (not committed): /usr/bin/python3 models/export.py --bench /tmp/bench_models
# ONLY=name1,name2 exports only those models (the others' committed files stay as they are).
ONLY ?=
models:
	/usr/bin/python3 models/export.py$(if $(ONLY), --only $(ONLY))
	$(if $(ONLY),,/usr/bin/python3 models/export_opset23.py)

# ---- ONNX Runtime, the peer to beat (tools/ort: Node.js, outside the Go module) ----
# ort-install   install onnxruntime-node 1.30.0 from tools/ort/package-lock.json (install script skipped:
#               it downloads from a host that is unreachable; the CPU library ships in the package)
# ort-check     ONNX Runtime vs the PyTorch outputs committed in models/ (no attnrun needed)
# ort-diff      build bin/attnrun, then cross-check attnrun against ONNX Runtime over models/
# bench-models  export the large seed-000 C=768 benchmark models into $(BENCH_MODELS) if missing,
#               and a 12-layer BERT-base-sized nn.TransformerEncoder (340 MB of weights)
#               and GPT-2's original attention at C=768 (torch.where with -1e4, then the padding mask)
#               and GPT-2's block around it (LayerNorms, residuals, the gelu_new MLP)
#               (and s000_multi_head_c768_attention_op, its twin with one ONNX Attention node)
#               (needs python3-torch python3-onnx python3-numpy for /usr/bin/python3; not committed)
# bench-compare attnrun vs ONNX Runtime latency / peak RSS table (THREADS=2 by default), fp32 and bf16 rows,
#               GFLOP/s as a share of the machine's peak (go test -bench Roofline/peak ./ops/blas), and the
#               FP pipes' floor: the median time of jobs doing only the workload's multiply-adds (-bench Floor, right
#               after the workload's rounds);
#               BENCH_ROUNDS=3 rounds per workload, attnrun and ORT back to back, each with all its timed runs (the
#               latency ratio: the rounds' median)
ORT_DIR ?= tools/ort
ORT_STAMP := $(ORT_DIR)/node_modules/.package-lock.json
THREADS ?= 2
BENCH_ROUNDS ?= 3
BENCH_MODELS ?= bench/models
ATTNRUN ?= bin/attnrun

.PHONY: ort-install ort-check ort-diff bench-models bench-compare

ort-install:
	cd $(ORT_DIR) && npm ci --ignore-scripts

$(ORT_STAMP): $(ORT_DIR)/package.json $(ORT_DIR)/package-lock.json
	cd $(ORT_DIR) && npm ci --ignore-scripts
	touch $@

ort-check: $(ORT_STAMP)
	node $(ORT_DIR)/diff.js --ort-only models

ort-diff: $(ORT_STAMP)
	if [ "$(ATTNRUN)" = bin/attnrun ]; then go build -o bin/attnrun ./cmd/attnrun; fi
	ATTNRUN=$(abspath $(ATTNRUN)) node $(ORT_DIR)/diff.js models

bench-models:
	@if [ -f $(BENCH_MODELS)/s000_multi_head_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/s000_causal_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/s000_causal_or_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/torch_encoder12_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/gpt2_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/gpt2_block_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/timm_vit_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/swinv2_window_attention_c96/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/clip_text_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/t5_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/t5_encoder12_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/llama_block_c1024/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/llama_decode_c1024/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/llama_mha_decode_c1024/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/opt_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/gpt_oss_attention_c1024/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/sam_global_attention_c768/model.onnx ] && \
	    [ -f $(BENCH_MODELS)/sam_window_attention_c768/model.onnx ]; then \
		echo "bench models present in $(BENCH_MODELS)"; \
	else \
		/usr/bin/python3 models/export.py --bench $(BENCH_MODELS); \
	fi
	@if [ ! -f $(BENCH_MODELS)/s000_multi_head_c768_attention_op/model.onnx ]; then \
		/usr/bin/python3 models/export_opset23.py --bench $(BENCH_MODELS); \
	fi

bench-compare: $(ORT_STAMP) bench-models
	if [ "$(ATTNRUN)" = bin/attnrun ]; then go build -o bin/attnrun ./cmd/attnrun; fi
	node $(ORT_DIR)/bench.js --threads $(THREADS) --rounds $(BENCH_ROUNDS) --bench-models $(BENCH_MODELS) --attnrun $(ATTNRUN) --peak

# ---- Conformance: ONNX's node tests and the op table ----
# node-suite  run ONNX's backend node tests for every op the backend claims (BACKEND=cpu by default), two suites:
#             Debian's onnx 1.12 data (libonnx-testdata; NODE_SUITE overrides the directory) against
#             conformance/expectations/$(BACKEND).txt, and ONNX 1.22's ../shared/onnx-node (node/ and node-opset24/;
#             ONNX122_SUITE overrides, default ../shared/onnx-node beside the repository, skipped loudly when absent)
#             against conformance/expectations/$(BACKEND)-onnx122.txt with upstream's rtol 1e-3, atol 1e-7.
#             `go test ./conformance/` runs the same checks.
# ops-table   regenerate docs/ops.md from the op registry (`attnrun ops --markdown`, built-in backends only);
#             TestOpsTableMatchesDocs in cmd/attnrun fails when docs/ops.md is stale.
BACKEND ?= cpu
NODE_SUITE ?= /usr/share/libonnx-testdata/data/node
ONNX122_SUITE ?=

.PHONY: node-suite ops-table

node-suite: build
	go run ./conformance/nodesuite --attnrun bin/attnrun --backend $(BACKEND) --debian $(NODE_SUITE)$(if $(ONNX122_SUITE), --onnx122 $(ONNX122_SUITE))

ops-table: build
	mkdir -p docs
	ATTNRUN_PLUGIN_DIR= ./bin/attnrun ops --markdown > docs/ops.md.tmp
	mv docs/ops.md.tmp docs/ops.md

# ---- Serving: attnrun serve (README "Serve") ----
# serve-load   ghz (gRPC, installed at a pinned version if missing) and wrk (HTTP) against attnrun serve:
#              the s003 latency target and the s000 C=768 S=128 batching target (DURATION=60s by default)
# serve-fault  kill -9 a backend in the middle of a ghz load and count what the clients saw
# serve-gen    regenerate serve/v2pb from KServe's grpc_predict_v2.proto (needs protoc; see serve/gen.sh)
.PHONY: serve-load serve-fault serve-gen

serve-load: build bench-models
	ATTNRUN=bin/attnrun BENCH_MODELS=$(BENCH_MODELS) ./scripts/serve-load.sh

serve-fault: build bench-models
	ATTNRUN=bin/attnrun BENCH_MODELS=$(BENCH_MODELS) ./scripts/serve-fault.sh

serve-gen:
	./serve/gen.sh
