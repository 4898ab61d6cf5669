package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckPeriod is how often the files are stat'ed when no fsnotify
// event announced a change.
const DefaultCheckPeriod = time.Minute

// source is a set of files loaded together.
type source interface {
	// files returns the paths to watch.
	files() []string
	// reload reads the files again: changed is true when a new, valid
	// set was loaded; err says why a new set was refused (the old one
	// stays). Files whose content was loaded, or refused, before give
	// neither.
	reload() (changed bool, err error)
	// describe names what was loaded, for the log.
	describe() []any
}

// KeyPair is a serving certificate and its private key, read from two PEM
// files. GetCertificate returns the pair last loaded successfully.
type KeyPair struct {
	certFile, keyFile string
	// current is the pair being served, never nil after LoadKeyPair.
	current atomic.Pointer[loadedPair]
	// failures counts new sets of files that did not load.
	failures atomic.Int64

	mu sync.Mutex // serialises reload
	// refused is the content of the last set that did not load, so that
	// it is reported once, not on every event.
	refused [2][]byte
}

type loadedPair struct {
	cert            *tls.Certificate
	certPEM, keyPEM []byte
}

// LoadKeyPair reads certFile and keyFile (PEM); it fails when they do not
// form a key pair.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// GetCertificate is tls.Config.GetCertificate: the pair loaded last.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.current.Load().cert, nil
}

// Leaf returns the certificate being served (its serial, its expiry).
func (k *KeyPair) Leaf() *x509.Certificate { return k.current.Load().cert.Leaf }

// Failures returns how many new sets of files have been refused since start.
func (k *KeyPair) Failures() int64 { return k.failures.Load() }

func (k *KeyPair) files() []string { return []string{k.certFile, k.keyFile} }

func (k *KeyPair) describe() []any {
	leaf := k.Leaf()
	return []any{"cert", k.certFile, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "notAfter", leaf.NotAfter}
}

func (k *KeyPair) reload() (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	certPEM, err := os.ReadFile(k.certFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(k.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS key: %w", err)
	}
	if cur := k.current.Load(); cur != nil && bytes.Equal(cur.certPEM, certPEM) && bytes.Equal(cur.keyPEM, keyPEM) {
		return false, nil
	}
	if bytes.Equal(k.refused[0], certPEM) && bytes.Equal(k.refused[1], keyPEM) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil && cert.Leaf == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		k.refused = [2][]byte{certPEM, keyPEM}
		k.failures.Add(1)
		return false, fmt.Errorf("loading the TLS key pair %s, %s: %w", k.certFile, k.keyFile, err)
	}
	k.refused = [2][]byte{}
	k.current.Store(&loadedPair{cert: &cert, certPEM: certPEM, keyPEM: keyPEM})
	return true, nil
}

// CAPool is a bundle of CA certificates read from one PEM file, which
// client certificates are verified against.
type CAPool struct {
	file string
	// current is the pool in use, never nil after LoadCAPool.
	current atomic.Pointer[loadedPool]
	// failures counts new contents of the file that did not load.
	failures atomic.Int64

	mu      sync.Mutex // serialises reload
	refused []byte     // the content last refused
}

type loadedPool struct {
	pool *x509.CertPool
	pem  []byte
	// first is the subject of the first CA in the bundle, for the log.
	first string
}

// LoadCAPool reads file (PEM, one or more CA certificates).
func LoadCAPool(file string) (*CAPool, error) {
	p := &CAPool{file: file}
	if _, err := p.reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Pool returns the CAs loaded last.
func (p *CAPool) Pool() *x509.CertPool { return p.current.Load().pool }

// Failures returns how many new contents of the file have been refused.
func (p *CAPool) Failures() int64 { return p.failures.Load() }

func (p *CAPool) files() []string { return []string{p.file} }

func (p *CAPool) describe() []any {
	return []any{"clientCA", p.file, "firstSubject", p.current.Load().first}
}

func (p *CAPool) reload() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, err := os.ReadFile(p.file)
	if err != nil {
		return false, fmt.Errorf("reading the client CA file: %w", err)
	}
	if cur := p.current.Load(); (cur != nil && bytes.Equal(cur.pem, data)) || (p.refused != nil && bytes.Equal(p.refused, data)) {
		return false, nil
	}
	pool, first, err := parseCAs(data)
	if err != nil {
		p.refused = data
		p.failures.Add(1)
		return false, fmt.Errorf("loading the client CA file %s: %w", p.file, err)
	}
	p.refused = nil
	p.current.Store(&loadedPool{pool: pool, pem: data, first: first})
	return true, nil
}

// parseCAs parses every CERTIFICATE block of data; it fails when there is
// none or one does not parse.
func parseCAs(data []byte) (*x509.CertPool, string, error) {
	pool := x509.NewCertPool()
	first := ""
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, "", fmt.Errorf("parsing a CA certificate: %w", err)
		}
		if first == "" {
			first = c.Subject.String()
		}
		pool.AddCert(c)
	}
	if first == "" {
		return nil, "", errors.New("no CERTIFICATE block in the file")
	}
	return pool, first, nil
}
