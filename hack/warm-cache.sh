#!/usr/bin/env bash
# Builds ahead what make test's later steps compile, from make test's start:
# beside the control plane's build, then while the root module's tests run
# (most of those wait on a real control plane). make test runs this at
# nice 19, so a test never waits for it, and starts
# the next modules' tests when it has compiled their dependencies (the file
# $WARM_DEPS_DONE appears), so nothing is compiled twice at once; its last
# step, the real node's binaries, goes on beside them.
#
# Nothing here is needed for correctness: every later step builds what it
# misses and reports its own errors, so a failed step here only says so.
#
# What it warms (make test then runs those modules' tests together):
#   - Go's build cache, -race, with the non-test dependencies of every test
#     package of test/kubelet, test/chart and dra (go build of packages, no
#     link: nothing is written but the cache);
#   - kubectl, which test/kubelet's docs tests run (make controlplane
#     leaves it out: nothing before them needs it);
#   - as root (the real-node tests skip otherwise): the real node's kubelet,
#     kube-proxy and kube-controller-manager (which the DRA tests run too)
#     and containerd 2, its runtime, in the control-plane cache
#     (~/.cache/gpushare).
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}

status=0
step() {
	local start=$SECONDS
	if "$@"; then
		echo "warm-cache: $* took $((SECONDS - start))s"
	else
		echo "warm-cache: $* failed after $((SECONDS - start))s (the step that needs it builds it again and reports why)"
		status=1
	fi
}

# deps_race DIR: compiles, with -race, every non-standard package that the
# test packages of the module in DIR import, themselves excluded (a test
# variant is compiled with its tests) and commands excluded (go build would
# link them) and test-only packages excluded (go build refuses them).
deps_race() {
	(
		cd "$1" || exit 1
		pkgs=$($GO list -deps -test -f '{{if and (not .Standard) (ne .Name "main") (not .ForTest) (or .GoFiles .CgoFiles)}}{{.ImportPath}}{{end}}' ./...) || exit 1
		# shellcheck disable=SC2086 # one argument per package
		$GO build -race $pkgs
	)
}

# -trimpath as in make controlplane: the command is compiled already.
# (test/kubelet's clusters build the node agent with -race under go test
# -race: its dependencies are among these.)
step deps_race test/kubelet
step $GO run -trimpath ./test/cmd/controlplane build-kubectl
step deps_race test/chart
step deps_race dra
# make test starts the later modules' tests now (WARM_DEPS_DONE: the file
# it waits for); the real-node test waits for build-node's binaries under
# the control-plane cache's lock.
if [ -n "${WARM_DEPS_DONE:-}" ]; then
	touch "$WARM_DEPS_DONE"
fi
if [ "$(id -u)" = 0 ]; then
	# One go run: the node's binaries and containerd's build side by side
	# (their links overlap), under one hold of the cache's lock.
	step $GO run -trimpath ./test/cmd/controlplane build-node -containerd
fi
exit $status
