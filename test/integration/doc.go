// Package integration runs the extender against a real kube-apiserver and
// kube-scheduler (see framework) and checks placements through the API.
package integration
