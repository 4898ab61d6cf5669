// Package kubeinfo is what the extender keeps of each pod and node, decoded
// once when it arrives; the informers store it in place of the objects.
package kubeinfo
