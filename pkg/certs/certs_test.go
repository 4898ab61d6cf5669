package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/certs/certstest"
)

// serve runs an HTTPS server with cfg on loopback until the test ends and
// returns its address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	go func() { _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// servedSerial dials addr trusting ca and returns the serial of the
// certificate it presents.
func servedSerial(t *testing.T, addr string, ca *certstest.CA) *big.Int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// waitSerial waits until addr serves the certificate with serial want.
func waitSerial(t *testing.T, addr string, ca *certstest.CA, want *big.Int) {
	t.Helper()
	var got *big.Int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = servedSerial(t, addr, ca); got.Cmp(want) == 0 {
			return
		}
	}
	t.Fatalf("served serial %v, want %v", got, want)
}

// TestKeyPairFollowsASecretVolume: a certificate rotated in a Secret volume
// (kubelet swaps the ..data symlink) is served for new handshakes without
// a restart; a new pair that does not load (a key from another pair) is
// refused, counted and the old pair kept; a good pair after it is served.
func TestKeyPairFollowsASecretVolume(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ca := certstest.NewCA(t, "test-ca")
	dir := t.TempDir()
	first := ca.Server(t)
	certstest.WriteSecretVolume(t, dir, certstest.SecretFiles(ca, first))
	kp, err := LoadKeyPair(filepath.Join(dir, certstest.CertFile), filepath.Join(dir, certstest.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	// A period of an hour: only the fsnotify events can trigger a reload.
	go kp.Run(ctx, time.Hour)
	addr := serve(t, ServerConfig(kp, nil))
	if got := servedSerial(t, addr, ca); got.Cmp(first.Serial) != 0 {
		t.Fatalf("served serial %v, want %v", got, first.Serial)
	}

	second := ca.Server(t)
	certstest.WriteSecretVolume(t, dir, certstest.SecretFiles(ca, second))
	waitSerial(t, addr, ca, second.Serial)

	third := ca.Server(t)
	certstest.WriteSecretVolume(t, dir, map[string][]byte{certstest.CertFile: third.CertPEM, certstest.KeyFile: second.KeyPEM, certstest.CAFile: ca.PEM})
	for deadline := time.Now().Add(5 * time.Second); kp.Failures() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a mismatched pair was not reported")
		}
	}
	if got := servedSerial(t, addr, ca); got.Cmp(second.Serial) != 0 {
		t.Errorf("after a broken pair: served serial %v, want the previous %v", got, second.Serial)
	}

	certstest.WriteSecretVolume(t, dir, certstest.SecretFiles(ca, third))
	waitSerial(t, addr, ca, third.Serial)
	if got := kp.Failures(); got != 1 {
		t.Errorf("Failures() = %d, want 1", got)
	}
}

// TestStatFallback: with no fsnotify events at all, files rewritten in
// place are noticed by the periodic stat, also when they changed between
// the first load and the start of the watch.
func TestStatFallback(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ca := certstest.NewCA(t, "test-ca")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	write := func(p certstest.Pair) {
		for f, data := range map[string][]byte{certFile: p.CertPEM, keyFile: p.KeyPEM} {
			if err := os.WriteFile(f, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(ca.Server(t))
	kp, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	second := ca.Server(t)
	write(second) // after the load, before the watch
	reloaded := make(chan struct{}, 10)
	go loop(ctx, 20*time.Millisecond, kp.files(), nil, nil, func() {
		if changed, err := kp.reload(); changed && err == nil {
			reloaded <- struct{}{}
		}
	})
	for _, want := range []certstest.Pair{second, ca.Server(t)} {
		if want.Serial != second.Serial {
			write(want)
		}
		select {
		case <-reloaded:
		case <-time.After(10 * time.Second):
			t.Fatalf("serial %v not loaded", want.Serial)
		}
		if got := kp.Leaf().SerialNumber; got.Cmp(want.Serial) != 0 {
			t.Errorf("serial %v, want %v", got, want.Serial)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	ca := certstest.NewCA(t, "test-ca")
	dir := t.TempDir()
	a, b := ca.Server(t), ca.Server(t)
	files := map[string][]byte{"a.crt": a.CertPEM, "b.key": b.KeyPEM, "a.key": a.KeyPEM, "empty.pem": []byte("not PEM\n")}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	if _, err := LoadKeyPair(p("a.crt"), p("b.key")); err == nil {
		t.Error("LoadKeyPair with another pair's key: no error")
	}
	if _, err := LoadKeyPair(p("a.crt"), p("missing.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyPair with a missing key: %v, want a not-exist error", err)
	}
	if _, err := LoadKeyPair(p("a.crt"), p("a.key")); err != nil {
		t.Errorf("LoadKeyPair: %v", err)
	}
	if _, err := LoadCAPool(p("empty.pem")); err == nil {
		t.Error("LoadCAPool without a certificate: no error")
	}
	if _, err := LoadCAPool(p("a.key")); err == nil {
		t.Error("LoadCAPool of a key: no error")
	}
}

// TestClientCAs: with a client CA the server takes only client certificates
// that CA signed (none at all is refused too); when the CA file changes,
// new connections are verified against the new CA.
func TestClientCAs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	serverCA, caA, caB := certstest.NewCA(t, "server-ca"), certstest.NewCA(t, "client-ca-a"), certstest.NewCA(t, "client-ca-b")
	dir := t.TempDir()
	certstest.WriteSecretVolume(t, dir, map[string][]byte{certstest.CAFile: caA.PEM})
	kpDir := t.TempDir()
	certstest.WriteSecretVolume(t, kpDir, certstest.SecretFiles(serverCA, serverCA.Server(t)))
	kp, err := LoadKeyPair(filepath.Join(kpDir, certstest.CertFile), filepath.Join(kpDir, certstest.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAPool(filepath.Join(dir, certstest.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	go pool.Run(ctx, time.Hour)
	addr := serve(t, ServerConfig(kp, pool))

	roots := x509.NewCertPool()
	roots.AddCert(serverCA.Cert)
	get := func(client *certstest.Pair) error {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if client != nil {
			c, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := hc.Get("https://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	fromA, fromB := caA.Client(t, "scheduler"), caB.Client(t, "scheduler")
	if err := get(&fromA); err != nil {
		t.Errorf("client certificate of the trusted CA: %v", err)
	}
	if err := get(&fromB); err == nil {
		t.Error("client certificate of another CA: accepted")
	}
	if err := get(nil); err == nil {
		t.Error("no client certificate: accepted")
	}

	certstest.WriteSecretVolume(t, dir, map[string][]byte{certstest.CAFile: caB.PEM})
	for deadline := time.Now().Add(10 * time.Second); get(&fromB) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new client CA was not loaded")
		}
	}
	if err := get(&fromA); err == nil {
		t.Error("after the CA changed: a client certificate of the old CA is still accepted")
	}
}
