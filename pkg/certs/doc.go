// Package certs serves TLS certificates and client CA bundles read from PEM
// files and reloaded when the files change on disk, so that certificates
// rotated by cert-manager, or a Secret volume kubelet updates (it writes
// the new files into a fresh directory and swaps the ..data symlink), are
// served for new handshakes without a restart.
//
// A change is noticed through fsnotify events on the files' directories,
// debounced, and, as a fallback where events are lost (some volume types,
// a directory replaced as a whole), by a stat of every file each period. A
// new set of files that does not load (a key that does not match its
// certificate, half-written files, no certificate in a CA bundle) is
// reported and the previous one is kept.
package certs
