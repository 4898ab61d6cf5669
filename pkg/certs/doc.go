// Package certs serves TLS certificates and client CA bundles read from PEM
// files and reloaded when the files change on disk. Certificates rotated by
// cert-manager, or a Secret volume kubelet updates, are thus served for new
// handshakes without a restart. kubelet writes the new files into a fresh
// directory and swaps the ..data symlink.
//
// A change is noticed through debounced fsnotify events on the files'
// directories. Where events are lost, with some volume types or a directory
// replaced as a whole, a stat of every file each period notices it. A new
// set of files may not load: a key that does not match its certificate,
// half-written files, or no certificate in a CA bundle. It is then reported
// and the previous one is kept.
package certs
