package extender

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/certs"
)

// tlsFiles are the certificates the extender serves and the client CAs it
// trusts, each reloaded when its files change. A field is nil when not
// configured.
type tlsFiles struct {
	api       *certs.KeyPair
	clientCAs *certs.CAPool
	webhook   *certs.KeyPair
}

// loadTLS reads the TLS files cfg names.
func loadTLS(cfg Config) (*tlsFiles, error) {
	var f tlsFiles
	var err error
	if cfg.TLSCertFile != "" {
		if f.api, err = certs.LoadKeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err)
		}
	}
	if cfg.ClientCAFile != "" {
		if f.clientCAs, err = certs.LoadCAPool(cfg.ClientCAFile); err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if cfg.WebhookListen != "" {
		if f.webhook, err = certs.LoadKeyPair(cfg.WebhookTLSCertFile, cfg.WebhookTLSKeyFile); err != nil {
			return nil, fmt.Errorf("--webhook-tls-cert-file, --webhook-tls-key-file: %w", err)
		}
	}
	return &f, nil
}

// watch reloads every file when it changes, until ctx ends.
func (f *tlsFiles) watch(ctx context.Context, period time.Duration) {
	named := func(name string) context.Context {
		return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("listener", name))
	}
	if f.api != nil {
		go f.api.Run(named("extender"), period)
	}
	if f.clientCAs != nil {
		go f.clientCAs.Run(named("extender"), period)
	}
	if f.webhook != nil {
		go f.webhook.Run(named("webhook"), period)
	}
}

// register adds, for each listener with a certificate, the metrics of its
// expiry and of the reloads refused.
func (f *tlsFiles) register(reg prometheus.Registerer) error {
	add := func(listener, file string, kp *certs.KeyPair, failures func() int64) error {
		labels := prometheus.Labels{"listener": listener, "file": file}
		cs := []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "tls_reload_failures_total", ConstLabels: labels,
			Help: "New TLS files that did not load (the previous ones are kept), by listener and file (keypair, client-ca).",
		}, func() float64 { return float64(failures()) })}
		if kp != nil {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "gpushare", Subsystem: "extender", Name: "tls_certificate_expiry_timestamp_seconds", ConstLabels: prometheus.Labels{"listener": listener},
				Help: "When the certificate a listener serves expires, Unix seconds.",
			}, func() float64 { return float64(kp.Leaf().NotAfter.Unix()) }))
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("registering the TLS metrics: %w", err)
			}
		}
		return nil
	}
	var errs []error
	if f.api != nil {
		errs = append(errs, add("extender", "keypair", f.api, f.api.Failures))
	}
	if f.clientCAs != nil {
		errs = append(errs, add("extender", "client-ca", nil, f.clientCAs.Failures))
	}
	if f.webhook != nil {
		errs = append(errs, add("webhook", "keypair", f.webhook, f.webhook.Failures))
	}
	return errors.Join(errs...)
}
