// Package image builds gpushare's three container images (the
// scheduler extender, the device plugin and the kubectl plugin) from one
// set of recipes: with docker, podman or buildah and build/*.Dockerfile
// when one of them is usable, and otherwise with no daemon at all, by
// compiling each binary with the Go toolchain and writing an OCI image
// layout (package oci) around it.
//
// The Go-native images hold the binary at /usr/local/bin/NAME, /etc/passwd
// and /etc/group naming root (0) and nonroot (65532), /tmp, and, for the
// device plugin, which is linked against glibc because go-nvml loads
// libnvidia-ml.so.1 through cgo, the build host's dynamic loader and the
// shared libraries the binary needs, found from its ELF headers (PT_INTERP
// and DT_NEEDED, recursively). The NVIDIA container runtime adds
// libnvidia-ml.so.1 at run time; a test checks the image finds it there.
package image
