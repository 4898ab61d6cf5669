package gpushare

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// Decoders must never panic, and whatever they accept (Validate passed:
// the decoders check that) must survive an encode/decode round trip
// unchanged.

func FuzzParseAllocation(f *testing.F) {
	f.Add(`{"node":"gpu-a","unit":"GiB","containers":[{"name":"prep","init":true,"devices":[{"index":1,"uuid":"GPU-b","units":8}]},{"name":"train","devices":[{"index":1,"uuid":"GPU-b","units":4}]}]}`)
	f.Add(`{"node":"n","containers":[{"name":"c","devices":[{"index":0,"units":1},{"index":0,"units":1}]}]}`)
	f.Add(`{"node":"","containers":null}`)
	f.Add(`[]`)
	f.Add(`{"node":"n","containers":[{"name":"c","devices":[{"index":-1,"units":9223372036854775807}]}]}`)
	// Two shares on one card whose sum wraps int64.
	f.Add(`{"node":"n","containers":[{"name":"a","devices":[{"index":0,"units":9223372036854775807}]},{"name":"b","devices":[{"index":0,"units":1}]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			return
		}
		enc, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseAllocation(enc)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", enc, err)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("round trip changed the allocation (-first +second):\n%s", diff)
		}
		// Validate sees each share alone; their sums must not wrap.
		for idx, u := range a.PerCard() {
			if u <= 0 {
				t.Fatalf("PerCard has %d units on card %d", u, idx)
			}
		}
	})
}

func FuzzParseInventory(f *testing.F) {
	f.Add(`{"unit":"GiB","devices":[{"index":0,"uuid":"GPU-8f1c","model":"Tesla T4","memory":16,"healthy":true},{"index":1,"uuid":"GPU-2a7e","model":"A100","memory":80,"healthy":false}]}`)
	f.Add(`{"unit":"MiB","devices":[]}`)
	f.Add(`{"unit":"TiB"}`)
	f.Add(`{"unit":"GiB","devices":[{"index":0,"memory":16},{"index":0,"memory":16}]}`)
	f.Add(`{"unit":"GiB","devices":[{"index":0,"uuid":"a,b","memory":1}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := ParseInventory(s)
		if err != nil {
			return
		}
		enc, err := inv.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseInventory(enc)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", enc, err)
		}
		if diff := cmp.Diff(inv, again); diff != "" {
			t.Fatalf("round trip changed the inventory (-first +second):\n%s", diff)
		}
	})
}

func FuzzParseCordonedGPUs(f *testing.F) {
	for _, s := range []string{"GPU-a,GPU-b", " GPU-a , GPU-b ", "GPU-a,,GPU-b", "GPU-*", "", ",", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uuids, err := ParseCordonedGPUs(s)
		if err != nil {
			return
		}
		if len(uuids) > MaxCardListEntries {
			t.Fatalf("%d UUIDs parsed, limit %d", len(uuids), MaxCardListEntries)
		}
		for _, u := range uuids {
			if u == "" || strings.TrimSpace(u) != u || strings.ContainsAny(u, "*?, ") {
				t.Fatalf("UUID %q is empty, untrimmed or holds a pattern character", u)
			}
		}
	})
}

// FuzzPodDemand: a pod as JSON (the extender decodes them from
// kube-scheduler's requests, the informers from the API); whatever demand
// is accepted asks at least one unit on at least one card per container,
// and its total does not wrap.
func FuzzPodDemand(f *testing.F) {
	for _, s := range []string{
		`{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"8"}}}]}}`,
		`{"spec":{"initContainers":[{"name":"i","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}],"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"8","aliyun.com/gpu-count":"2"}}}]}}`,
		`{"spec":{"initContainers":[{"name":"s","restartPolicy":"Always","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}],"containers":[{"name":"c"}]}}`,
		`{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"9223372036854775807","aliyun.com/gpu-count":"4"}}}]}}`,
		`{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"1.5"}}}]}}`,
		`{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var pod corev1.Pod
		if json.Unmarshal([]byte(s), &pod) != nil {
			return
		}
		d, err := PodDemand(&pod)
		if err != nil {
			return
		}
		if len(d) == 0 {
			t.Fatalf("no error and no demand for %s", s)
		}
		for _, c := range d {
			if c.Units <= 0 || c.Cards < 1 || c.Total() < c.Units {
				t.Fatalf("container %q: %d units on %d cards (total %d) accepted", c.Name, c.Units, c.Cards, c.Total())
			}
		}
		if d.Total() <= 0 {
			t.Fatalf("total %d for %s", d.Total(), s)
		}
	})
}
