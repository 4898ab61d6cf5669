// Package realnode installs the chart with `helm install` (Helm's Go
// packages, the code the CLI runs) on a real node (test/node) joined to a
// real control plane, with gpushare's images from `make images`, and
// checks what the node does with it: every pod of the release Running and
// Ready, GPU pods on the card their annotation names as seen from inside
// the container (the test image prints its environment and mounts to its
// log, which the node's containerd writes), and nothing left after
// `helm uninstall`. The device plugin serves simulated cards
// (devicePlugin.fakeGPUs), as no GPU is here.
//
// Cluster is shared by the tests of a run and by `make node-demo`
// (cmd/nodedemo).
package realnode
