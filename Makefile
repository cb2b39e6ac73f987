# shardproof — see README.md.
GO      ?= go
BIN     := bin/shardproof
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
DEMO_DIR ?= $(CURDIR)/.demo

.PHONY: all build build-cgozstd test demo lint fuzz chaos bench bench-scale clean deps

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/shardproof

# build-cgozstd builds bin/shardproof-cgozstd, which decompresses Parquet
# pages with the C zstd library (cgo) instead of the pure-Go decoder.
build-cgozstd:
	CGO_ENABLED=1 $(GO) build -tags cgozstd -ldflags "$(LDFLAGS)" -o $(BIN)-cgozstd ./cmd/shardproof

# deps installs what the tests need beyond Go modules (run as root on Debian).
deps:
	@./scripts/deps.sh

test: deps build
	$(GO) vet ./...
	CI=$${CI:-} $(GO) test -count=1 -timeout 25m ./...
	CGO_ENABLED=1 $(GO) test -count=1 -tags cgozstd ./internal/cgozstd
	cd bench && $(GO) vet ./... && CI=$${CI:-} $(GO) test -count=1 -timeout 10m ./...
	cd examples/indepwriter && $(GO) vet ./... && $(GO) test -count=1 ./...
	./examples/indepwriter/check.sh $(BIN)

demo: build
	@./scripts/demo.sh $(BIN) $(DEMO_DIR)

# lint: gofmt, go vet (here, and for macOS and Windows: everything,
# tests included, compiles there; tests needing Linux services skip
# there) and staticcheck (pinned; fetched from the module proxy and built
# on first use).
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	GOOS=windows GOARCH=amd64 $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd examples/indepwriter && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

# fuzz runs every fuzz target for FUZZTIME each, guided then unguided
# (scripts/fuzz.sh; the seed corpora run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# chaos runs the gate's chaos test for CHAOS_TIME: three `gate serve`
# processes, SIGKILLed, restarted, SIGSTOPped and partitioned under concurrent clients,
# the history checked for linearizability with porcupine (a 12 s smoke of
# it runs in `make test`). The history is written to
# chaos-out/gate-chaos-history.json (TestGateChaosReplay checks one again,
# SHARDPROOF_CHAOS_REPLAY=FILE), and a failing one drawn beside it (.html).
CHAOS_TIME ?= 3m
chaos:
	@mkdir -p chaos-out
	SHARDPROOF_CHAOS_TIME=$(CHAOS_TIME) SHARDPROOF_CHAOS_DIR=$(CURDIR)/chaos-out $(GO) test -count=1 -timeout 0 -run '^TestGateChaos$$' -v ./cmd/shardproof

# bench runs the benchmark harness, its own Go module (bench/README.md);
# never part of `make test`. BENCH_SHARDS=0 means samples / 32768.
BENCH_SAMPLES ?= 200000
BENCH_SHARDS  ?= 0
BENCH_ROUNDS  ?= 3
bench: build
	cd bench && $(GO) build -o ../bin/spbench . && ../bin/spbench run -shardproof ../$(BIN) -samples $(BENCH_SAMPLES) -shards $(BENCH_SHARDS) -rounds $(BENCH_ROUNDS)

# bench-scale: verify at 1M and 4M records; BENCH_LARGEST=1 adds 16M.
bench-scale: build
	cd bench && $(GO) build -o ../bin/spbench . && ../bin/spbench scale -shardproof ../$(BIN) -rounds $(BENCH_ROUNDS) $(if $(BENCH_LARGEST),-largest)

clean:
	rm -rf bin $(DEMO_DIR)

# s3-up runs a local S3 server (versitygw, pinned in tools/go.mod) on
# $(S3_ADDR) with data under .s3/ and a versioned bucket; s3-down stops it.
S3_ADDR   ?= 127.0.0.1:7070
S3_BUCKET ?= shardproof
S3_KEY    ?= shardproof
S3_SECRET ?= shardproof-secret
S3_BIN     = $(shell $(GO) env GOCACHE)/shardproof-versitygw/versitygw-v1.8.0

.PHONY: s3-up s3-down
s3-up:
	@mkdir -p .s3/root .s3/versions $(dir $(S3_BIN))
	@test -x $(S3_BIN) || { echo "building versitygw (first time takes minutes)…"; $(GO) -C tools build -o $(S3_BIN) github.com/versity/versitygw/cmd/versitygw; }
	@if [ -f .s3/pid ] && kill -0 $$(cat .s3/pid) 2>/dev/null; then echo "versitygw already running (pid $$(cat .s3/pid))"; \
	else nohup $(S3_BIN) --port $(S3_ADDR) --access $(S3_KEY) --secret $(S3_SECRET) --health /health --quiet \
	  posix --versioning-dir $(CURDIR)/.s3/versions $(CURDIR)/.s3/root >.s3/versitygw.log 2>&1 & echo $$! >.s3/pid; fi
	@AWS_ACCESS_KEY_ID=$(S3_KEY) AWS_SECRET_ACCESS_KEY=$(S3_SECRET) $(GO) -C tools run ./cmd/s3bucket -endpoint http://$(S3_ADDR) -bucket $(S3_BUCKET)
	@echo "versitygw on http://$(S3_ADDR) (pid $$(cat .s3/pid), log .s3/versitygw.log). Use:"
	@echo "  export AWS_ACCESS_KEY_ID=$(S3_KEY) AWS_SECRET_ACCESS_KEY=$(S3_SECRET)"
	@echo "  --store 's3://$(S3_BUCKET)/?endpoint=http://$(S3_ADDR)&region=us-east-1'"

s3-down:
	@if [ -f .s3/pid ]; then kill $$(cat .s3/pid) 2>/dev/null || true; rm -f .s3/pid; echo "versitygw stopped (data kept in .s3/)"; \
	else echo "versitygw not running"; fi
