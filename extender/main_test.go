package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
)

// TestDefaultListenIsLoopback: unless told otherwise the extender is reached
// only from its own host (kube-scheduler beside it), since its verbs can
// bind any pending GPU pod and inspect shows every GPU pod.
func TestDefaultListenIsLoopback(t *testing.T) {
	cfg, _, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("default --listen %q is not a loopback address", cfg.Listen)
	}
}

func TestHelpNamesTheFlags(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := parseFlags([]string{"--help"}, &out); err == nil {
		t.Fatal("--help: no error")
	}
	for _, flag := range []string{"-listen", "-policy", "-kube-api-qps", "-assume-ttl", "-filter-best", "-version"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, out.String())
		}
	}
}
