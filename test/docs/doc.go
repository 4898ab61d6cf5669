// Package docs finds the shell blocks of the project's Markdown (README,
// docs/, the chart's README, CONTRIBUTING, SECURITY) and what runs each:
// every block a user is told to run carries a marker on the line before
// its fence saying which test runs it, or why none can:
//
//	<!-- test: cluster -->                run on the demo cluster (test/kubelet/e2e TestDocsCommands)
//	<!-- test: cluster expect=REGEXP -->  the same, and its output must match REGEXP
//	<!-- test: chart -->                  helm install/upgrade/template lines, rendered with Helm's packages (test/chart TestDocsHelmCommands)
//	<!-- test: make -->                   make lines, dry-run with make -n (this package's TestMakeCommands)
//	<!-- test: skip REASON -->            not run; REASON says why and what test covers it instead
//
// This package's tests fail on a shell block without a marker, and list
// every skipped block with its reason.
package docs
