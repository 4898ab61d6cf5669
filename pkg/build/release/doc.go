// Package release names, packs and lists the files of a gpushare release
// (`make release`): the binaries per platform, the kubectl plugin's
// archives and the krew manifest that installs them, and SHA256SUMS.
package release
