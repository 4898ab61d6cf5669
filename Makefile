# gpushare: GPU sharing by memory for Kubernetes. `make help` lists the targets.

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -ec

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/gpushare/gpushare/pkg/version.Version=$(VERSION)
TOOLS    := $(CURDIR)/bin/tools
GOLANGCI := $(TOOLS)/golangci-lint
GOLANGCI_VERSION := v2.15.0
# The integration tests build a real control plane the first time (~15 min
# on 2 cores); the real-node test (test/chart/realnode, root only) builds
# kubelet, kube-proxy and kube-controller-manager the first time too.
TEST_TIMEOUT ?= 45m
# Programs the root module's go test runs at once (compiles, links, test
# binaries): one more than the 2 cores, as test/integration's binary waits
# on control planes for minutes at about a quarter of a core.
ROOT_TEST_P ?= 3
# make test's build-cache warm-up (hack/warm-cache.sh) logs here.
WARM_CACHE_LOG ?= _output/warm-cache.log
# -trimpath: the command's client-go then compiles as the device plugin's
# image build compiles it (cgo on, -trimpath), once for both in a cold make test.
CONTROLPLANE = $(GO) run -trimpath ./test/cmd/controlplane

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the binaries into bin/.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/gpushare-scheduler-extender ./extender
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/gpushare-simulate ./simulator
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/kubectl-inspect-gpushare ./kubectl-inspect-gpushare
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/gpushare-device-plugin ./deviceplugin
	cd dra && $(GO) build -ldflags '$(LDFLAGS)' -o ../bin/gpushare-dra-driver ./cmd/gpushare-dra-driver

# --- container images (issue 12) ---
IMAGE_BUILDER ?= auto
IMAGE_PREFIX  ?=
REVISION      ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

.PHONY: images
images: ## Build the four images (extender, device plugin, kubectl plugin, DRA driver) as NAME:VERSION: docker (with a daemon), podman or buildah with build/*.Dockerfile, else the Go-native builder into _output/images/ (IMAGE_BUILDER=auto|docker|podman|buildah|go, IMAGE_PREFIX=registry/org/).
	$(GO) run ./hack/ocibuild --builder=$(IMAGE_BUILDER) --version=$(VERSION) --revision=$(REVISION) --prefix=$(IMAGE_PREFIX) --out=_output/images

# --- releases (issue 24) and publishing them (issue 46) ---
RELEASE_DIR ?= _output/release
# This host's platform; for more, e.g. PLATFORMS=linux/amd64,linux/arm64
# (the device plugin and the DRA driver need cgo: apt-get install
# gcc-aarch64-linux-gnu on an amd64 host).
PLATFORMS   ?= linux/$(shell $(GO) env GOARCH)
# Where make publish pushes the images and the chart, and where the
# release's chart and image archives name them: HOST[:PORT][/PATH].
REGISTRY    ?= ghcr.io/gpushare

.PHONY: release
release: ## Make release VERSION (the tag, vX.Y.Z) in _output/release for REGISTRY (ghcr.io/gpushare): the chart package (its images default to REGISTRY), binaries and image archives for PLATFORMS (this host's; e.g. PLATFORMS=linux/amd64,linux/arm64, where the device plugin and the DRA driver need the C cross compiler), the kubectl plugin's archives and krew manifest, and SHA256SUMS.
	rm -rf $(RELEASE_DIR)
	cd test/chart && $(GO) run ./cmd/packagechart --version=$(VERSION) --registry=$(REGISTRY) --out=$(abspath $(RELEASE_DIR))
	$(GO) run ./hack/release --version=$(VERSION) --revision=$(REVISION) --platforms=$(PLATFORMS) --registry=$(REGISTRY) --out=$(RELEASE_DIR)

.PHONY: publish
publish: release ## Make the release, then push its four images to REGISTRY/NAME:VERSION (an OCI index of PLATFORMS' images when more than one) and its chart to oci://REGISTRY/charts/gpushare, with docker login's credentials; no docker, skopeo or buildah needed.
	$(GO) run ./hack/release publish --registry=$(REGISTRY) --version=$(VERSION) --dir=$(RELEASE_DIR)

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver and kube-scheduler v1.37.2 from Go modules, once (cached under ~/.cache/gpushare; ~15 min cold on 2 cores; make test's warm-up adds kubectl, for the docs tests, and as root the real node's binaries).
	$(CONTROLPLANE) build

.PHONY: test
test: ## Run every test with -race on Kubernetes 1.37.2: unit, fuzz seed corpora, golden files, integration against a real control plane, kubelet's device manager, the DRA driver against a real control plane, and (as root) a real node on containerd 2 with helm install and the DRA driver (1.34.3: make test-k8s, make node-test-k8s).
	@# hack/warm-cache.sh builds the later modules' dependencies (and, as
	@# root, the real node's binaries) at nice 19 from the start, while the
	@# control plane builds (make controlplane) and the root module's tests
	@# run, so that its last step is done when the later modules need it
	@# (cold: 63.1 min when it started after the control plane, 56.3 min
	@# now; docs/development.md); its own process group, so a failed run
	@# stops it too. The
	@# later modules' tests wait on control planes and a real node far more
	@# than they compute: they start together (hack/test-modules.sh, each
	@# one's output whole as it ends) once the warm-up has compiled their
	@# dependencies, while it builds the real node's binaries (the real-node
	@# test waits for those under the control-plane cache's lock).
	@mkdir -p $(dir $(WARM_CACHE_LOG)); rm -f $(WARM_CACHE_LOG).deps-done; \
	GO='$(GO)' WARM_DEPS_DONE='$(WARM_CACHE_LOG).deps-done' setsid nice -n 19 bash hack/warm-cache.sh >$(WARM_CACHE_LOG) 2>&1 & warm=$$!; \
	stop_warm() { kill -- -$$warm 2>/dev/null || kill $$warm 2>/dev/null || true; wait $$warm; }; \
	echo "$(CONTROLPLANE) build   (warming the build cache alongside: $(WARM_CACHE_LOG))"; \
	rc=0; $(CONTROLPLANE) build || rc=$$?; \
	if [ $$rc -ne 0 ]; then stop_warm; exit $$rc; fi; \
	echo "$(GO) test -race -p $(ROOT_TEST_P) -timeout $(TEST_TIMEOUT) ./..."; \
	start=$$(date +%s); $(GO) test -race -p $(ROOT_TEST_P) -timeout $(TEST_TIMEOUT) ./... || rc=$$?; \
	echo "the root module's go test took $$(( $$(date +%s) - start ))s"; \
	if [ $$rc -ne 0 ]; then stop_warm; exit $$rc; fi; \
	while kill -0 $$warm 2>/dev/null && [ ! -e $(WARM_CACHE_LOG).deps-done ]; do sleep 1; done; \
	grep '^warm-cache:' $(WARM_CACHE_LOG) || true; \
	GO='$(GO)' bash hack/test-modules.sh \
		'test/kubelet:-race -timeout $(TEST_TIMEOUT) ./...' \
		'test/chart:-race -timeout $(TEST_TIMEOUT) ./...' \
		'dra:-race -timeout $(TEST_TIMEOUT) ./...' || rc=$$?; \
	wait $$warm || true; grep -E '^warm-cache: .*build-(node|containerd)' $(WARM_CACHE_LOG) || true; exit $$rc

.PHONY: dra-demo
dra-demo: ## Run the DRA driver locally: a Kubernetes 1.37 control plane (built once, ~15 min cold), the driver on a simulated 16 GiB card, claims of 4+8+4 GiB sharing it and one that waits; prints inspect and KUBECONFIG=, stays up (make dra-demo-down).
	$(CONTROLPLANE) build -kcm
	cd dra && $(GO) build -trimpath -o ../bin/gpushare-dra-demo ./test/cmd/drademo
	bin/gpushare-dra-demo up

.PHONY: dra-demo-down
dra-demo-down: ## Stop exactly the processes make dra-demo started (PID files under _output/dra-demo).
	cd dra && $(GO) build -trimpath -o ../bin/gpushare-dra-demo ./test/cmd/drademo
	bin/gpushare-dra-demo down

.PHONY: test-dra
test-dra: ## Run the DRA driver's tests alone with -race, its integration tests against a real Kubernetes 1.37 control plane included (make test runs them too).
	$(CONTROLPLANE) build -kcm
	cd dra && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# The other Kubernetes version the harness builds (make test runs v1.37.2).
K8S_VERSION ?= v1.34.3

.PHONY: test-k8s
test-k8s: ## Run the control-plane integration tests (test/integration: extender, webhook, chart's scheduler topologies, placement) and the device plugin's end-to-end tests (test/kubelet/e2e) against kube-apiserver and kube-scheduler $(K8S_VERSION) (v1.34.3, the oldest we test, or v1.37.2; a cold v1.34.3 build is ~12 min on 2 cores).
	$(CONTROLPLANE) build -version $(K8S_VERSION)
	GPUSHARE_KUBERNETES_VERSION=$(K8S_VERSION) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./test/integration/...
	cd test/kubelet && GPUSHARE_KUBERNETES_VERSION=$(K8S_VERSION) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./e2e/

.PHONY: unit
unit: ## Run the tests that need no control plane (-short), kubelet's device manager included.
	$(GO) test -race -short ./...
	cd test/kubelet && $(GO) test -race -short ./...
	cd test/chart && $(GO) test -race -short ./...
	cd dra && $(GO) test -race -short ./...

BENCH_NODES ?= 5000
# Rounds of each scheduling-throughput configuration, alternating (3 settles
# the extender/plain ratio on a shared machine; each round at 5,000 nodes
# takes ~1 min per configuration, measured on 2 cores).
BENCH_ROUNDS ?= 1

.PHONY: bench
bench: controlplane ## Run the benchmarks, the extender RSS (15,000 nodes), filter-over-HTTP latency and scheduling-throughput (BENCH_NODES, BENCH_ROUNDS) measurements (reported, never asserted); with BASE=<commit>, that commit's extender is measured beside this tree's in each.
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	@set -e; base_ext=""; \
	if [ -n "$(BASE)" ]; then \
	  tmp=$$(mktemp -d); git worktree add -q --detach $$tmp/tree $(BASE); \
	  (cd $$tmp/tree && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w' -o $$tmp/extender ./extender); \
	  git worktree remove --force $$tmp/tree; base_ext=$$tmp/extender; \
	  echo "base extender: $(BASE), built in $$base_ext"; \
	fi; \
	GPUSHARE_BENCH=1 GPUSHARE_BENCH_NODES=$(BENCH_NODES) GPUSHARE_BENCH_ROUNDS=$(BENCH_ROUNDS) GPUSHARE_BENCH_BASE_EXTENDER=$$base_ext \
	  $(GO) test -count=1 -timeout 120m -run '^(TestExtenderRSS|TestSchedulingThroughput|TestFilterLatency)$$' -v ./test/bench/ | grep -E '^(Benchmark|--- |ok|FAIL)|(rss|throughput|filterlatency)_test'

BASE       ?=
BENCH      ?= .
BENCH_PKGS ?= ./pkg/cache,./pkg/allocator
BENCHTIME  ?= 1s
ROUNDS     ?= 6

.PHONY: bench-compare
bench-compare: ## Compare BENCH_PKGS' benchmarks (BENCH regexp) with those of commit BASE, alternating the two trees for ROUNDS rounds in one run: medians, new/base ratios and their range.
	@[ -n "$(BASE)" ] || { echo "bench-compare needs BASE=<commit>, e.g. make bench-compare BASE=HEAD~5 BENCH=FilterBest"; exit 2; }
	$(GO) run ./hack/benchcmp -base $(BASE) -pkgs $(BENCH_PKGS) -bench '$(BENCH)' -benchtime $(BENCHTIME) -rounds $(ROUNDS)

# Every Fuzz* target of the root module (found by name, so a new one is
# never left out), each run for FUZZTIME. Their seed corpora already run as
# unit tests in make test. A crash is written under the package's
# testdata/fuzz/ and stops the run; commit it as a seed with the fix.
FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Fuzz every Fuzz* target for FUZZTIME each (default 10s; e.g. make fuzz FUZZTIME=10m).
	@for dir in $$(git grep -l '^func Fuzz' -- '*_test.go' ':!test/kubelet' | xargs -n1 dirname | sort -u); do \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | sed 's/^func //'); do \
	    echo "== fuzz ./$$dir $$t for $(FUZZTIME)"; \
	    $(GO) test ./$$dir -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

GOVULNCHECK         := $(TOOLS)/govulncheck
GOVULNCHECK_VERSION := v1.9.0
# The vulnerability database; file:///path for a local mirror (where
# vuln.go.dev cannot be reached: go run ./hack/vulndb -osv <golang/vulndb
# checkout>/data/osv -out DIR -modified <its commit date>, then
# VULNDB=file://DIR).
VULNDB ?= https://vuln.go.dev
# Findings accepted in the test-only module test/kubelet, which imports
# kubelet's device manager from k8s.io/kubernetes and ships in no image:
# advisories against the whole k8s.io/kubernetes module that no release
# fixes. GO-2025-3547 (CVE-2024-7598): a kube-apiserver race while a
# namespace is deleted; GO-2025-3521 (CVE-2025-1767): kubelet's deprecated
# gitRepo volume. Neither code path runs in these tests. Any other finding
# fails. Entries are MODULE:ID.
VULNCHECK_ACCEPTED := test/kubelet:GO-2025-3547 test/kubelet:GO-2025-3521

$(GOVULNCHECK):
	GOBIN=$(TOOLS) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

.PHONY: vulncheck
vulncheck: $(GOVULNCHECK) ## Run govulncheck on the three modules (installed into bin/tools); fails, saying so, when VULNDB cannot be reached.
	@for mod in . test/kubelet test/chart; do \
	  echo "== govulncheck $$mod (database $(VULNDB))"; \
	  rc=0; out=$$(cd $$mod && $(GOVULNCHECK) -db $(VULNDB) ./... 2>&1) || rc=$$?; \
	  echo "$$out"; \
	  if grep -q 'fetching vulnerabilities' <<<"$$out"; then \
	    echo "vulncheck: the vulnerability database $(VULNDB) cannot be reached from here, so NOTHING WAS CHECKED."; \
	    echo "vulncheck: run it where vuln.go.dev is reachable, or point VULNDB at a mirror (VULNDB=file:///path)."; \
	    exit 2; \
	  fi; \
	  if [ $$rc -ne 0 ]; then \
	    found=$$(grep -oE '^Vulnerability #[0-9]+: GO-[0-9]+-[0-9]+' <<<"$$out" | sed 's/.*: //' | sort -u); \
	    [ -n "$$found" ] || exit $$rc; \
	    for id in $$found; do \
	      case " $(VULNCHECK_ACCEPTED) " in *" $$mod:$$id "*) ;; *) echo "vulncheck: $$mod: $$id is not accepted"; exit $$rc;; esac; \
	    done; \
	    echo "vulncheck: $$mod: every finding ($$(echo $$found)) is accepted with its reason in the Makefile"; \
	  fi; \
	done

$(GOLANGCI):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

.PHONY: lint
lint: $(GOLANGCI) ## Run golangci-lint (installed into bin/tools on first use).
	$(GOLANGCI) run ./...
	cd test/kubelet && $(GOLANGCI) run ./...
	cd test/chart && $(GOLANGCI) run ./...
	cd dra && $(GOLANGCI) run ./...

.PHONY: verify
verify: lint ## Check gofmt, go vet, lint and that go.mod/go.sum are tidy.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test/kubelet && $(GO) vet ./...
	cd test/chart && $(GO) vet ./...
	cd dra && $(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@cd dra && $(GO) mod tidy -diff || { echo "dra/go.mod/go.sum are not tidy: run go mod tidy in dra"; exit 1; }
	@cd test/kubelet && $(GO) mod tidy -diff || { echo "test/kubelet/go.mod/go.sum are not tidy: run go mod tidy in test/kubelet"; exit 1; }
	@cd test/chart && $(GO) mod tidy -diff || { echo "test/chart/go.mod/go.sum are not tidy: run go mod tidy in test/chart"; exit 1; }

.PHONY: clean
clean: ## Remove bin/ (not the control-plane cache).
	rm -rf bin

HELM_VERSION := v3.22.0

.PHONY: helm
helm: ## Install helm $(HELM_VERSION) into bin/tools (optional: the tests render the chart with Helm's Go packages).
	GOBIN=$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: chart-update
chart-update: ## Rewrite manifests/rendered and the chart README's values table from manifests/charts/gpushare.
	cd test/chart && $(GO) test -count=1 -run '^(TestPlainManifests|TestChartReadme)$$' . -update

# --- demo and end-to-end tests (issue 5) ---
DEMO_NODES    ?= 3
EXTENDER_PORT ?= 39999
E2E_TIMEOUT   ?= 30m

.PHONY: demo
demo: ## Run gpushare locally: control plane, extender, DEMO_NODES simulated GPU nodes, manifests/examples/; stays up (make demo-down).
	cd test/kubelet && $(GO) build -o ../../bin/gpushare-demo ./cmd/demo
	bin/gpushare-demo up --nodes $(DEMO_NODES) --extender-port $(EXTENDER_PORT)

.PHONY: demo-down
demo-down: ## Stop exactly the processes make demo started (PID files under _output/demo).
	cd test/kubelet && $(GO) build -o ../../bin/gpushare-demo ./cmd/demo
	bin/gpushare-demo down

# --- a real node (issue 22): containerd, runc, CNI, kubelet; needs root ---
NODE_TIMEOUT ?= 60m

.PHONY: node-demo
node-demo: ## Run gpushare on a real node (root; no GPU): control plane, containerd+runc+CNI+kubelet, helm install, GPU pods; prints inspect and KUBECONFIG=, stays up (make node-demo-down).
	cd test/chart && $(GO) build -o ../../bin/gpushare-node-demo ./cmd/nodedemo
	bin/gpushare-node-demo up

.PHONY: node-demo-down
node-demo-down: ## Stop every process make node-demo started and tear the real node down (mounts, iptables, bridge, cgroups).
	cd test/chart && $(GO) build -o ../../bin/gpushare-node-demo ./cmd/nodedemo
	bin/gpushare-node-demo down

.PHONY: node-test
node-test: controlplane ## The real-node tests alone, verbose (root), on Kubernetes 1.37.2 and containerd 2 built from its module: helm install in both topologies, the DRA driver, driver mode (CDI devices applied), and faults.
	cd test/chart && $(GO) test -count=1 -timeout $(NODE_TIMEOUT) -v ./realnode/ -args -realnode.faults

.PHONY: node-test-k8s
node-test-k8s: ## The real-node tests on Kubernetes $(K8S_VERSION) (root; default v1.34.3): control plane, kubelet and kube-proxy of that version; helm install in both topologies, faults, driver mode, on Debian's containerd 1.6 (kubelet 1.35 and older), then on containerd 2 (which applies CDI devices).
	$(CONTROLPLANE) build -version $(K8S_VERSION)
	@minor=$$(echo $(K8S_VERSION) | cut -d. -f2); if [ "$$minor" -lt 36 ]; then \
		echo "cd test/chart && $(GO) test ... -realnode.kubernetes=$(K8S_VERSION) -realnode.runtime=containerd-1.6"; \
		cd test/chart && $(GO) test -count=1 -timeout $(NODE_TIMEOUT) -v ./realnode/ -args -realnode.faults -realnode.kubernetes=$(K8S_VERSION) -realnode.runtime=containerd-1.6; \
	fi
	cd test/chart && $(GO) test -count=1 -timeout $(NODE_TIMEOUT) -v ./realnode/ -args -realnode.faults -realnode.kubernetes=$(K8S_VERSION) -realnode.runtime=containerd-2

.PHONY: gpu-check
gpu-check: ## On a machine with an NVIDIA GPU (root, python3 with PyTorch): the device plugin on the real card (NVML discovery, XID watch, each isolation mode checked with CUDA processes, mps also in containers run by runc where runc is, MPS daemons across a plugin restart; TestRealGPU), and the DRA driver's claims in mps mode (TestRealGPUPrepare).
	$(GO) build -o bin/gpushare-device-plugin ./deviceplugin
	cd test/kubelet && GPUSHARE_REAL_GPU=1 GPUSHARE_REAL_GPU_PLUGIN=$(CURDIR)/bin/gpushare-device-plugin $(GO) test -count=1 -timeout 10m -run '^TestRealGPU$$' -v .
	cd dra && GPUSHARE_REAL_GPU=1 $(GO) test -count=1 -timeout 5m -run '^TestRealGPUPrepare$$' -v ./pkg/prepare/

.PHONY: gpu-check-bundle
gpu-check-bundle: ## gpu-check for a GPU machine without Go: _output/gpu-check/ (~35 MB) holds the two tests' binaries, the device plugin, this machine's runc (for the containers, where that machine has none) and gpu-check.sh; copy it there and run `bash gpu-check.sh`.
	rm -rf _output/gpu-check && mkdir -p _output/gpu-check
	cd test/kubelet && $(GO) test -c -ldflags '-s -w' -o ../../_output/gpu-check/kubelet.test .
	cd dra && $(GO) test -c -ldflags '-s -w' -o ../_output/gpu-check/dra-prepare.test ./pkg/prepare/
	$(GO) build -ldflags '-s -w' -o _output/gpu-check/gpushare-device-plugin ./deviceplugin
	@# This machine's runc and its libseccomp, for TestRealGPU's containers where the GPU machine has no runc.
	if r=$$(command -v runc); then mkdir -p _output/gpu-check/runc && cp "$$r" _output/gpu-check/runc/runc && \
		cp -L $$(ldd "$$r" | awk '/libseccomp/ {print $$3}') _output/gpu-check/runc/; fi
	xz -T0 -6 _output/gpu-check/kubelet.test _output/gpu-check/dra-prepare.test _output/gpu-check/gpushare-device-plugin
	cp hack/gpu-check.sh _output/gpu-check/

.PHONY: e2e
e2e: controlplane ## End-to-end tests: kube-scheduler -> extender -> device plugin -> kubelet's device manager on simulated nodes.
	cd test/kubelet && $(GO) test -race -count=1 -timeout $(E2E_TIMEOUT) -v ./e2e/

# --- chaos soak (issue 15) ---
DURATION     ?= 10m
SEED         ?= 0
OVERLAP      ?= 2
SOAK_TIMEOUT ?= 3h

.PHONY: soak
soak: controlplane ## Chaos soak: mixed pods over 4 simulated GPU nodes, 2 kube-scheduler replicas electing a leader each with its extender sidecar, while faults kill extender and kube-scheduler leaders and followers, device plugins and kubelets, pause the API server and fail cards, up to OVERLAP (2) at once, for DURATION (10m); SEED=S replays a run. Ends with one line "soak: seed=S faults=N kinds=K pods=P violations=V overlapped=O"; fails on any violation.
	cd test/kubelet && $(GO) test -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./soak/ -args -soak.duration=$(DURATION) -soak.seed=$(SEED) -soak.overlap=$(OVERLAP)
