// Package chart renders manifests/charts/gpushare with Helm's own Go
// packages (helm.sh/helm/v3, pinned in this module's go.mod, no network),
// and its tests check what it renders: the committed plain manifests under
// manifests/rendered, the files the chart copies or mirrors, and every
// combination of values applied with server-side dry-run to a real
// kube-apiserver.
package chart
