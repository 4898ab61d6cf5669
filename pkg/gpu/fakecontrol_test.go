package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func newTestFake(t *testing.T) *Fake {
	t.Helper()
	devs, err := ParseFakeGPUs("2xTesla-T4:16GiB", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return NewFake(devs)
}

func TestFakeApply(t *testing.T) {
	tests := []struct {
		name       string
		lines      []string
		wantEvents []Event
		wantProbe  []bool // per card: probe fails
		wantErr    string
	}{
		{name: "xid", lines: []string{"xid 1 79"}, wantEvents: []Event{{UUID: FakeUUID("node-a", 1), XID: 79}}, wantProbe: []bool{false, false}},
		{name: "probe fail", lines: []string{"probe 0 fail"}, wantProbe: []bool{true, false}},
		{name: "probe fail then ok", lines: []string{"probe 0 fail", "probe 0 ok"}, wantProbe: []bool{false, false}},
		{name: "comment and blank", lines: []string{"# note", "  "}, wantProbe: []bool{false, false}},
		{name: "unknown card", lines: []string{"xid 2 79"}, wantErr: "this node has cards 0..1"},
		{name: "negative card", lines: []string{"xid -1 79"}, wantErr: "names card -1"},
		{name: "zero xid", lines: []string{"xid 0 0"}, wantErr: "no positive XID"},
		{name: "bad probe", lines: []string{"probe 0 maybe"}, wantErr: "fail or ok"},
		{name: "unknown command", lines: []string{"melt 0 now"}, wantErr: "unknown command melt"},
		{name: "too few words", lines: []string{"xid 1"}, wantErr: "has 2 words"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFake(t)
			var err error
			for _, l := range tc.lines {
				if err = f.Apply(l); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrFakeCommand) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply error = %v, want ErrFakeCommand containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []Event
			for len(f.events) > 0 {
				got = append(got, <-f.events)
			}
			if diff := cmp.Diff(tc.wantEvents, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			var probe []bool
			for i := range 2 {
				probe = append(probe, f.Probe(FakeUUID("node-a", i)) != nil)
			}
			if diff := cmp.Diff(tc.wantProbe, probe); diff != "" {
				t.Errorf("probe failures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFakeFollowControl(t *testing.T) {
	f := newTestFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	path := filepath.Join(t.TempDir(), "control")
	go func() {
		defer close(done)
		f.FollowControl(ctx, path, 5*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()

	if err := os.WriteFile(path, []byte("bogus line here\nprobe 1 fail\nxid 1 48\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-f.events:
		if want := (Event{UUID: FakeUUID("node-a", 1), XID: 48}); e != want {
			t.Errorf("event = %+v, want %+v", e, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event from the control file")
	}
	if f.Probe(FakeUUID("node-a", 1)) == nil {
		t.Error("probe of card 1 succeeds after \"probe 1 fail\"")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err1 := os.Stat(path)
		_, err2 := os.Stat(path + ".applying")
		if errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the control file was not removed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
