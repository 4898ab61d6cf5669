#!/usr/bin/env bash
# Builds ahead what make test's later steps compile, while the root module's
# tests run: most of those wait on a real control plane and leave a core idle
# for minutes (measured: 35-40% CPU busy on 2 cores during test/integration).
# make test runs this at nice 19, so a test never waits for it, and waits for
# it before the next module's tests, so nothing is compiled twice at once.
#
# Nothing here is needed for correctness: every later step builds what it
# misses and reports its own errors, so a failed step here only says so.
#
# What it warms (make test then runs those modules' tests together):
#   - Go's build cache, -race, with the non-test dependencies of every test
#     package of test/kubelet, test/chart and dra (go build of packages, no
#     link: nothing is written but the cache);
#   - test/kubelet's node agent's dependencies, without -race and with
#     -trimpath, as its clusters build it;
#   - kubectl, which test/kubelet's docs tests run (make controlplane
#     leaves it out: nothing before them needs it);
#   - as root (the real-node tests skip otherwise): the real node's kubelet,
#     kube-proxy and kube-controller-manager in the control-plane cache
#     (~/.cache/gpushare); make test's real node runs Debian's containerd.
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
	deps "$1" "-race" -test ./...
}

# deps_trimpath DIR PKG: compiles PKG's non-standard dependencies as the
# tests build PKG (-trimpath, no -race), without linking it.
deps_trimpath() {
	deps "$1" "-trimpath" "$2"
}

# deps DIR BUILDFLAGS LISTARGS...: go build BUILDFLAGS of the packages that
# go list -deps LISTARGS... names in DIR, as deps_race says.
deps() {
	(
		cd "$1" || exit 1
		flags=$2
		shift 2
		pkgs=$($GO list -deps -f '{{if and (not .Standard) (ne .Name "main") (not .ForTest) (or .GoFiles .CgoFiles)}}{{.ImportPath}}{{end}}' "$@") || exit 1
		# shellcheck disable=SC2086 # one argument per package
		$GO build $flags $pkgs
	)
}

# -trimpath as in make controlplane: the command is compiled already.
step deps_race test/kubelet
# test/kubelet's clusters build the node agent (k8s.io/kubernetes' kubelet
# packages): its e2e and soak tests would otherwise compile them at once.
step deps_trimpath test/kubelet ./cmd/nodeagent
step $GO run -trimpath ./test/cmd/controlplane build-kubectl
step deps_race test/chart
step deps_race dra
if [ "$(id -u)" = 0 ]; then
	step $GO run -trimpath ./test/cmd/controlplane build-node
fi
exit $status
