package certs

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// debounce is how long the files must be quiet after an event before they
// are read. kubelet's Secret update is several events: a new directory, the
// ..data rename, the old directory removed. A writer that is not atomic
// writes the certificate and the key one after the other.
const debounce = 100 * time.Millisecond

// Run reloads the pair whenever its files change, until ctx ends, as the
// package doc describes. period is the stat fallback's, DefaultCheckPeriod
// when not positive. A new pair is logged. One that does not load is logged
// and the old one kept.
func (k *KeyPair) Run(ctx context.Context, period time.Duration) { watch(ctx, period, k) }

// Run reloads the CAs whenever the file changes, until ctx ends, as
// KeyPair.Run does.
func (p *CAPool) Run(ctx context.Context, period time.Duration) { watch(ctx, period, p) }

// watch calls src.reload when one of its files may have changed, until ctx
// ends.
func watch(ctx context.Context, period time.Duration, src source) {
	logger := klog.FromContext(ctx)
	if period <= 0 {
		period = DefaultCheckPeriod
	}
	files := src.files()
	reload := func() {
		changed, err := src.reload()
		switch {
		case err != nil:
			logger.Error(err, "Keeping the previous TLS files: the new ones do not load", "files", files)
		case changed:
			logger.Info("Loaded new TLS files", src.describe()...)
		}
	}

	var events <-chan fsnotify.Event
	var errs <-chan error
	if w, err := fsnotify.NewWatcher(); err != nil {
		logger.Error(err, "Cannot watch the TLS files; stat'ing them periodically instead", "files", files, "period", period)
	} else {
		defer func() { _ = w.Close() }()
		var dirs []string
		for _, f := range files {
			if d := filepath.Dir(f); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		for _, d := range dirs {
			// The directory, not the file: a Secret volume replaces the
			// file's symlink target, which a watch on the file misses.
			if err := w.Add(d); err != nil {
				logger.Error(err, "Cannot watch a TLS directory; stat'ing its files periodically instead", "dir", d, "period", period)
			}
		}
		events, errs = w.Events, w.Errors
	}
	loop(ctx, period, files, events, errs, reload)
}

// loop calls reload at once, after events have been quiet for debounce,
// and when a stat every period shows a file changed, until ctx ends.
func loop(ctx context.Context, period time.Duration, files []string, events <-chan fsnotify.Event, errs <-chan error, reload func()) {
	logger := klog.FromContext(ctx)
	stats := statAll(files)
	// The files may have changed since they were loaded, before the watch
	// began: read them once now (nothing happens if they did not).
	reload()
	tick := time.NewTicker(period)
	defer tick.Stop()
	quiet := time.NewTimer(debounce)
	quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			quiet.Reset(debounce)
		case err := <-errs:
			logger.V(2).Info("Watching the TLS files", "err", err)
		case <-quiet.C:
			stats = statAll(files)
			reload()
		case <-tick.C:
			if s := statAll(files); !sameStats(stats, s) {
				stats = s
				reload()
			}
		}
	}
}

// statAll stats each file, following symlinks; nil for one that cannot be.
func statAll(files []string) []os.FileInfo {
	out := make([]os.FileInfo, len(files))
	for i, f := range files {
		out[i], _ = os.Stat(f)
	}
	return out
}

// sameStats reports whether a and b (from statAll over the same files)
// show the same files: the same inode, size and modification time.
func sameStats(a, b []os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if (a[i] == nil) != (b[i] == nil) {
				return false
			}
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}

// ServerConfig returns the TLS configuration of a server presenting kp's
// current certificate (TLS 1.2 or later, HTTP/1.1). With clientCAs it
// requires a client certificate and verifies it against the CAs loaded at
// the time of each handshake.
func ServerConfig(kp *KeyPair, clientCAs *CAPool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.GetCertificate, NextProtos: []string{"http/1.1"}}
	if clientCAs == nil {
		return cfg
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = clientCAs.Pool()
	base := cfg.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = clientCAs.Pool()
		return c, nil
	}
	return cfg
}
