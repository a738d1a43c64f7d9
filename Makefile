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
	@# The real-node test (test/realnode) loads both cores for minutes (image
	@# builds, a cluster, load runs): it runs after the others, alone, so
	@# neither it nor the timing-sensitive browser tests starve. It runs even
	@# when another package failed; the target fails if either did.
	@rc=0; \
	echo "$(GO) test $(TESTFLAGS) <every package but test/realnode>"; \
	$(GO) test $(TESTFLAGS) $$($(GO) list $(PKGS) | grep -v '/test/realnode$$') || rc=1; \
	if $(GO) list $(PKGS) | grep -q '/test/realnode$$'; then \
	  echo "$(GO) test $(TESTFLAGS) ./test/realnode"; $(GO) test $(TESTFLAGS) ./test/realnode || rc=1; fi; \
	exit $$rc

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

##@ Operator (api/, controllers/, config/, charts/, main.go)

CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
CHART          ?= charts/tetra-operator
VERSION        ?= $(shell sed -n 's/^const Version = "\(.*\)"/\1/p' internal/version/version.go)
IMG            ?= ghcr.io/tetra-messenger/tetra:$(VERSION)
OPERATOR_IMG   ?= ghcr.io/tetra-messenger/tetra-operator:$(VERSION)
CONTAINER_TOOL ?= docker

.PHONY: manifests generate operator run-operator envtest-assets test-operator docker-build docker-build-operator

manifests: ## CRD, RBAC (from markers) into config/, copied into the chart
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	mkdir -p $(CHART)/files/crds $(CHART)/files/rbac
	cp config/crd/bases/tetra.dev_messengers.yaml $(CHART)/files/crds/
	cp config/rbac/role.yaml $(CHART)/files/rbac/role.yaml

generate: ## deepcopy code (api/v1alpha1/zz_generated.deepcopy.go)
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

operator: ## build the operator manager into bin/
	$(GO) build -o bin/manager .

run-operator: ## run the operator against the current kubeconfig (no leader election by default)
	$(GO) run .

envtest-assets: ## build (once) kube-apiserver and etcd for envtest; prints the directory
	@bash hack/envtest-assets.sh

test-operator: ## the operator's tests only (envtest suites build their assets once)
	KUBEBUILDER_ASSETS="$$(bash hack/envtest-assets.sh)" $(GO) test $(TESTFLAGS) ./api/... ./controllers/... ./internal/operator/... ./config/... ./charts/... .

docker-build: ## the workload image (needs a container engine)
	$(CONTAINER_TOOL) build -t $(IMG) --build-arg TARGET=./workload/cmd/tetra .

docker-build-operator: ## the operator image (needs a container engine)
	$(CONTAINER_TOOL) build -t $(OPERATOR_IMG) --build-arg TARGET=. .
