package gpu

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestParseFakeGPUs(t *testing.T) {
	u := func(i int) string { return FakeUUID("node-a", i) }
	tests := []struct {
		name    string
		spec    string
		want    []Device
		wantErr string
	}{
		{
			name: "issue example",
			spec: "2xTesla-T4:16GiB,1xA100-SXM4:80GiB",
			want: []Device{
				{Card: gpushare.Card{Index: 0, UUID: u(0), Model: "Tesla-T4", MemoryMiB: 16384}},
				{Card: gpushare.Card{Index: 1, UUID: u(1), Model: "Tesla-T4", MemoryMiB: 16384}},
				{Card: gpushare.Card{Index: 2, UUID: u(2), Model: "A100-SXM4", MemoryMiB: 81920}},
			},
		},
		{name: "MiB", spec: "1xT4:15360MiB", want: []Device{{Card: gpushare.Card{Index: 0, UUID: u(0), Model: "T4", MemoryMiB: 15360}}}},
		{name: "x in the model", spec: "1xRTXx6000:48GiB", want: []Device{{Card: gpushare.Card{Index: 0, UUID: u(0), Model: "RTXx6000", MemoryMiB: 49152}}}},
		{name: "empty", spec: "", wantErr: "empty"},
		{name: "no count", spec: "xT4:16GiB", wantErr: "does not start with a count"},
		{name: "zero count", spec: "0xT4:16GiB", wantErr: "want 1..64"},
		{name: "huge count", spec: "65xT4:16GiB", wantErr: "want 1..64"},
		{name: "too many cards", spec: "64xT4:16GiB,64xT4:16GiB,1xT4:16GiB", wantErr: "more than 128 cards"},
		{name: "signed count", spec: "+2xT4:16GiB", wantErr: "does not start with a count"},
		{name: "no x", spec: "2T4:16GiB", wantErr: "no 'x'"},
		{name: "no colon", spec: "2xT4", wantErr: "no ':'"},
		{name: "no model", spec: "2x:16GiB", wantErr: "no model"},
		{name: "space in model", spec: "2xTesla T4:16GiB", wantErr: "in the model"},
		{name: "GB not GiB", spec: "2xT4:16GB", wantErr: "without GiB or MiB"},
		{name: "fraction", spec: "2xT4:1.5GiB", wantErr: "no whole number"},
		{name: "zero memory", spec: "2xT4:0GiB", wantErr: "want 1 MiB..1 TiB"},
		{name: "too much memory", spec: "1xT4:1025GiB", wantErr: "want 1 MiB..1 TiB"},
		{name: "trailing comma", spec: "1xT4:16GiB,", wantErr: "no 'x'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFakeGPUs(tc.spec, "node-a")
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrFakeSpec) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFakeGPUs(%q) error = %v, want ErrFakeSpec containing %q", tc.spec, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseFakeGPUs(%q) mismatch (-want +got):\n%s", tc.spec, diff)
			}
		})
	}
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestFakeUUID(t *testing.T) {
	seen := map[string]bool{}
	for _, seed := range []string{"node-a", "node-b"} {
		for i := 0; i < 8; i++ {
			u := FakeUUID(seed, i)
			if !uuidRE.MatchString(u) || seen[u] {
				t.Fatalf("FakeUUID(%s, %d) = %s: malformed or repeated", seed, i, u)
			}
			seen[u] = true
		}
	}
	// Stable across runs and releases: demos and scripts may hold on to it.
	if got, want := FakeUUID("node-a", 0), "GPU-8b7f7e71-182c-dddd-4660-5655b03984ea"; got != want {
		t.Errorf("FakeUUID(node-a, 0) = %s, want %s", got, want)
	}
}

func TestFakeEventsAndProbe(t *testing.T) {
	devs, err := ParseFakeGPUs("2xT4:16GiB", "n")
	if err != nil {
		t.Fatal(err)
	}
	f := NewFake(devs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Event)
	go func() { _ = f.WatchXIDs(ctx, out) }()
	f.InjectXID(devs[1].UUID, 79)
	if diff := cmp.Diff(Event{UUID: devs[1].UUID, XID: 79}, <-out); diff != "" {
		t.Errorf("event mismatch (-want +got):\n%s", diff)
	}
	f.SetProbeError(devs[0].UUID, errors.New("lost"))
	if f.Probe(devs[0].UUID) == nil || f.Probe(devs[1].UUID) != nil {
		t.Error("Probe does not follow SetProbeError")
	}
	f.SetProbeError(devs[0].UUID, nil)
	if f.Probe(devs[0].UUID) != nil {
		t.Error("Probe still fails after SetProbeError(nil)")
	}
}

func FuzzParseFakeGPUs(f *testing.F) {
	for _, s := range []string{"2xTesla-T4:16GiB,1xA100-SXM4:80GiB", "1xT4:15360MiB", "64xA:1MiB", "1xRTXx6000:48GiB", "", ",", "9999999999999999999xA:1GiB", "1xA:99999999999999999999GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		devs, err := ParseFakeGPUs(spec, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrFakeSpec) {
				t.Fatalf("error %v does not wrap ErrFakeSpec", err)
			}
			return
		}
		if len(devs) == 0 || len(devs) > maxFakeCards {
			t.Fatalf("%q parsed into %d cards", spec, len(devs))
		}
		seen := map[string]bool{}
		for i, d := range devs {
			if d.Index != i || d.MemoryMiB < 1 || d.MemoryMiB > maxFakeMemoryMiB || d.Model == "" || seen[d.UUID] || !uuidRE.MatchString(d.UUID) {
				t.Fatalf("%q parsed into a bad card %+v", spec, d)
			}
			seen[d.UUID] = true
		}
	})
}

// FuzzFakeApply: a line of the fake-GPU control file does what it says to
// a card of the node, or is refused with ErrFakeCommand.
func FuzzFakeApply(f *testing.F) {
	for _, s := range []string{"xid 0 79", "probe 1 fail", "probe 1 ok", "# comment", "", "xid 2 79", "xid -1 1", "xid 0 0", "probe 0 maybe", "reset 0 now", "xid 0 18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		devs, err := ParseFakeGPUs("2xT4:16GiB", "fuzz")
		if err != nil {
			t.Fatal(err)
		}
		fk := NewFake(devs)
		if err := fk.Apply(line); err != nil {
			if !errors.Is(err, ErrFakeCommand) {
				t.Fatalf("error %v does not wrap ErrFakeCommand", err)
			}
			return
		}
		select {
		case ev := <-fk.events:
			if ev.XID == 0 || (ev.UUID != devs[0].UUID && ev.UUID != devs[1].UUID) {
				t.Fatalf("%q injected %+v", line, ev)
			}
		default:
		}
	})
}

// FuzzParseFakeDriver: any --fake-driver value is parsed or refused with
// an error naming the flag; a parsed one has a version of digits and dots
// and the CUDA version its major implies.
func FuzzParseFakeDriver(f *testing.F) {
	for _, s := range []string{"", "615.00", "550.54.15,mps", "615.00,mps,cgroup-v1", "615", "615.00,", "x.y", "615.00,nope", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		d, err := ParseFakeDriver(spec)
		if err != nil {
			if !strings.Contains(err.Error(), "--fake-driver") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if spec == "" {
			if d != (FakeDriver{}) {
				t.Fatalf("empty value parsed as %+v", d)
			}
			return
		}
		if strings.Trim(d.Version, "0123456789.") != "" || !strings.HasPrefix(spec, d.Version) {
			t.Fatalf("version %q from %q", d.Version, spec)
		}
		if d.CUDAVersion != 12040 && d.CUDAVersion != 13040 {
			t.Fatalf("CUDA version %d from %q", d.CUDAVersion, spec)
		}
	})
}
