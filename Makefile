# drover — see README.md. Every target works on a fresh machine with Go;
# the fleet tests additionally need root (network namespaces) and the
# packages .ci/run installs.

export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
GO      ?= go
BIN     := bin/drover
PKGS    := ./...

.PHONY: all build test test-short lint demo bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/drover

# The README's test command: static checks, then every test (fleet tests
# included when run as root) with the race detector.
test: lint
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

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzLoad -fuzztime=60s ./cluster/config/

clean:
	rm -rf bin
