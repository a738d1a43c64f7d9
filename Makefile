# tetra: the messenger workload and its Kubernetes operator.
# `make test` is the test command CI runs (through .ci/run).

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 20m
FUZZTIME  ?= 30s

.PHONY: all build test test-short vet fmt fuzz bench run token loadgen clean

all: vet build test

build: ## build the workload binary into bin/
	$(GO) build -o bin/tetra ./workload/cmd/tetra

test: vet ## run every test (PostgreSQL/Redis tests skip loudly when those are absent, fail with CI=true)
	$(GO) test $(TESTFLAGS) $(PKGS)

test-short: ## the quick subset (no -race, -short)
	$(GO) test -short -count=1 $(PKGS)

vet: ## go vet and a gofmt check
	$(GO) vet $(PKGS)
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

fuzz: ## run the fuzz targets for FUZZTIME each
	$(GO) test ./workload/protocol -run '^$$' -fuzz FuzzDecodeClient -fuzztime $(FUZZTIME)

bench: ## hot-path benchmarks; compare runs with benchstat (docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

run: ## run the messenger on the embedded default
	$(GO) run ./workload/cmd/tetra serve

loadgen: ## the acceptance load run of the core issue
	$(GO) run ./workload/cmd/tetra loadgen --clients 200 --rate 500 --duration 20s

clean:
	rm -rf bin data
