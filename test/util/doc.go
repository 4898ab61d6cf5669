// Package util builds Kubernetes objects for tests with fluent fixtures,
// e.g. MakePod("train").GPUMem(8).Node("n1").Obj().
package util
