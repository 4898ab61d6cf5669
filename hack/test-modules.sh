#!/usr/bin/env bash
# Runs go test in several modules at once and prints each module's output
# whole, with the time it took, as it ends; exits non-zero when any failed.
#
# make test runs its later modules (test/kubelet, test/chart, dra) this way:
# their long tests wait on real control planes, a hosted device manager or
# a real node far more than they compute (the warm-up has compiled their
# dependencies by then), so together they take about as long as the
# longest one alone, not the sum. Nothing they start is shared: each
# control plane takes free ports and its own directory; only the real node
# (test/chart/realnode) uses the host's kubelet paths, under its own lock.
#
# usage: hack/test-modules.sh DIR:ARGS... ...
#   DIR is the module's directory, ARGS go test's arguments, e.g.
#   'test/kubelet:-race -timeout 45m ./...'
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Interrupted: stop every module's go test (and what it started).
trap 'kill 0 2>/dev/null; exit 130' INT TERM

declare -A dir_of args_of log_of started_at
n=0
for spec in "$@"; do
	dir=${spec%%:*} args=${spec#*:}
	n=$((n + 1))
	# shellcheck disable=SC2086 # go test's arguments, one word each
	(cd "$dir" && exec $GO test $args) >"$out/$n" 2>&1 &
	dir_of[$!]=$dir args_of[$!]=$args log_of[$!]=$out/$n started_at[$!]=$SECONDS
	echo "cd $dir && $GO test $args   (beside the others; its output when it ends)"
done

status=0
while [ ${#dir_of[@]} -gt 0 ]; do
	pid=
	wait -n -p pid "${!dir_of[@]}"
	rc=$?
	[ -n "$pid" ] || break
	echo "--- cd ${dir_of[$pid]} && $GO test ${args_of[$pid]}: exit $rc after $((SECONDS - started_at[$pid]))s"
	cat "${log_of[$pid]}"
	unset "dir_of[$pid]"
	[ $rc -eq 0 ] || status=$rc
done
exit $status
