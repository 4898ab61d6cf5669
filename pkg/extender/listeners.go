package extender

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"

	"k8s.io/klog/v2"
)

// newServer returns an HTTP server of handler with the timeouts t, zero
// fields taken from DefaultTimeouts. Its requests' contexts derive from
// ctx.
func newServer(ctx context.Context, handler http.Handler, t Timeouts) *http.Server {
	def := DefaultTimeouts
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cmp.Or(t.ReadHeader, def.ReadHeader),
		ReadTimeout:       cmp.Or(t.Read, def.Read),
		WriteTimeout:      cmp.Or(t.Write, def.Write),
		IdleTimeout:       cmp.Or(t.Idle, def.Idle),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// endpoint is one of the extender's listeners.
type endpoint struct {
	name, addr string
	handler    http.Handler
	// tls, when set, makes the listener HTTPS.
	tls *tls.Config
	ln  net.Listener
	srv *http.Server
}

// listenAll opens every endpoint's listener, or none: on an error it
// closes the ones opened.
func listenAll(eps []*endpoint) error {
	for i, ep := range eps {
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			for _, done := range eps[:i] {
				_ = done.ln.Close()
			}
			return fmt.Errorf("listening on %s for the %s listener (is another extender running?): %w", ep.addr, ep.name, err)
		}
		if ep.tls != nil {
			ln = tls.NewListener(ln, ep.tls)
		}
		ep.ln = ln
	}
	return nil
}

// serverLog passes net/http's error log to a structured logger. Among it
// are failed TLS handshakes: a client certificate refused, or a client
// that does not trust ours.
type serverLog struct{ logger klog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	s.logger.Error(errors.New(strings.TrimSpace(string(p))), "HTTP server error")
	return len(p), nil
}

// withProfiling serves next, and Go's profiles at /debug/pprof/ when on.
func withProfiling(next http.Handler, on bool) http.Handler {
	if !on {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
