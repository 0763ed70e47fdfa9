# drover — see README.md. Every target works on a fresh machine with Go;
# the fleet tests additionally need root (network namespaces) and the
# packages .ci/run installs.

export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
GO      ?= go
BIN     := bin/drover
PKGS    := ./...

# The platforms drover is built for; it needs no cgo on any of them.
PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: all build portable test test-short lint demo bench bench-quick fuzz clean

all: build

# bin/drover for this machine, and beside it the static agents that hosts
# get (chosen by their `uname -m`): all CGO_ENABLED=0, Linux ones carrying
# the NVML reader (scripts/build-agent). The agents are built without the
# symbol table and DWARF (-s -w; a panic still names its functions): 40%
# less to upload to a fresh host, whose install is mostly that upload. They
# are built with the droveragent tag, which leaves out every command but
# `drover agent` (cmd/drover/commands_agent.go) and the libraries only
# those commands use (drover top's terminal UI and Prometheus client), a
# quarter less again, and urfave_cli_no_docs, which leaves out the CLI
# library's man page and Markdown writers.
AGENT_FLAGS := -tags droveragent,urfave_cli_no_docs -ldflags='-s -w'
build:
	./scripts/build-agent $$($(GO) env GOOS) $$($(GO) env GOARCH) $(BIN)
	./scripts/build-agent linux amd64 bin/drover-agent-linux-amd64 $(AGENT_FLAGS)
	./scripts/build-agent linux arm64 bin/drover-agent-linux-arm64 $(AGENT_FLAGS)

# Every platform compiles with cgo off, and vet passes with cgo off (the
# tests that use go-nvml's mocks need cgo and are left out then). Compiles
# only, nothing is written, so the build cache keeps it fast.
portable:
	@for p in $(PLATFORMS); do \
	  echo "CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build ./..."; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./... || exit 1; \
	done
	CGO_ENABLED=0 $(GO) vet $(PKGS)

# The README's test command: static checks (cgo off too), then every test
# (fleet tests included when run as root) with the race detector.
test: lint portable
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

# Unit tests only: no fleet, no training.
test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# A real job on this machine: local hosts, no setup beyond Go.
demo: build
	./scripts/demo

bench: build
	./scripts/bench

# The same without the 256-host scale section.
bench-quick: build
	./scripts/bench --quick

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzLoad -fuzztime=60s ./cluster/config/

clean:
	rm -rf bin
