# shardproof — see README.md.
GO      ?= go
BIN     := bin/shardproof
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
DEMO_DIR ?= $(CURDIR)/.demo

.PHONY: all build test test-short demo lint fuzz bench clean deps

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/shardproof

# deps installs what the tests need beyond Go modules (run as root on Debian).
deps:
	@./scripts/deps.sh

test: deps build
	$(GO) vet ./...
	CI=$${CI:-} $(GO) test -count=1 -timeout 25m ./...

demo: build
	@./scripts/demo.sh $(BIN) $(DEMO_DIR)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

# fuzz runs every fuzz target for FUZZTIME each (the seed corpora run in `make test`).
FUZZTIME ?= 30s
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf bin $(DEMO_DIR)
