package util

import (
	"testing"
	"time"
)

func TestLatenciesQuantile(t *testing.T) {
	var l Latencies
	for i := 1; i <= 1000; i++ {
		l.Add(time.Duration(i) * time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := l.Quantile(tc.q)
		if got < tc.want || float64(got) > float64(tc.want)*1.0101 {
			t.Errorf("Quantile(%v) = %s, want %s within 1%%", tc.q, got, tc.want)
		}
	}
	if n := l.Count(); n != 1000 {
		t.Errorf("Count = %d", n)
	}
	var empty Latencies
	if empty.Quantile(0.99) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}
