package gpu

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestHealthTransitions(t *testing.T) {
	const window = 5 * time.Minute
	type step struct {
		advance   time.Duration
		event     *Event // Observe this event
		recover   bool   // call Recover
		probeFail bool   // the probe fails during Recover
		changed   []string
		healthy   map[string]bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "application XID changes nothing",
			steps: []step{
				{event: &Event{UUID: "a", XID: 13}, healthy: map[string]bool{"a": true, "b": true}},
				{event: &Event{UUID: "a", XID: 31}, healthy: map[string]bool{"a": true, "b": true}},
			},
		},
		{
			name: "critical XID, then recovery after the window",
			steps: []step{
				{event: &Event{UUID: "a", XID: 79}, changed: []string{"a"}, healthy: map[string]bool{"a": false, "b": true}},
				{advance: window - time.Second, recover: true, healthy: map[string]bool{"a": false, "b": true}},
				{advance: time.Second, recover: true, changed: []string{"a"}, healthy: map[string]bool{"a": true, "b": true}},
			},
		},
		{
			name: "a second XID restarts the window",
			steps: []step{
				{event: &Event{UUID: "a", XID: 48}, changed: []string{"a"}, healthy: map[string]bool{"a": false, "b": true}},
				{advance: 4 * time.Minute, event: &Event{UUID: "a", XID: 48}, healthy: map[string]bool{"a": false, "b": true}},
				{advance: 2 * time.Minute, recover: true, healthy: map[string]bool{"a": false, "b": true}},
				{advance: 3 * time.Minute, recover: true, changed: []string{"a"}, healthy: map[string]bool{"a": true, "b": true}},
			},
		},
		{
			name: "a card that fails its probe stays unhealthy until it answers",
			steps: []step{
				{event: &Event{UUID: "b", XID: 79}, changed: []string{"b"}, healthy: map[string]bool{"a": true, "b": false}},
				{advance: 10 * time.Minute, recover: true, probeFail: true, healthy: map[string]bool{"a": true, "b": false}},
				{advance: time.Minute, recover: true, changed: []string{"b"}, healthy: map[string]bool{"a": true, "b": true}},
			},
		},
		{
			name: "event for no card counts against all; unknown card against none",
			steps: []step{
				{event: &Event{UUID: "zzz", XID: 79}, healthy: map[string]bool{"a": true, "b": true}},
				{event: &Event{}, changed: []string{"a", "b"}, healthy: map[string]bool{"a": false, "b": false}},
				{advance: window, recover: true, changed: []string{"a", "b"}, healthy: map[string]bool{"a": true, "b": true}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0))
			h := NewHealth([]string{"a", "b"}, window, clk)
			for i, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.advance))
				var changed []string
				if s.event != nil {
					changed = h.Observe(*s.event)
				}
				if s.recover {
					changed = h.Recover(func(string) error {
						if s.probeFail {
							return errors.New("GPU is lost")
						}
						return nil
					})
				}
				if diff := cmp.Diff(s.changed, changed); diff != "" {
					t.Errorf("step %d: changed mismatch (-want +got):\n%s", i, diff)
				}
				got := map[string]bool{"a": h.Healthy("a"), "b": h.Healthy("b")}
				if diff := cmp.Diff(s.healthy, got); diff != "" {
					t.Errorf("step %d: health mismatch (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestHealthUnknownCard(t *testing.T) {
	h := NewHealth([]string{"a"}, 0, nil)
	if !h.Healthy("a") {
		t.Fatal("new card reported unhealthy")
	}
	if h.Healthy("unknown") {
		t.Error("unknown card reported healthy")
	}
}
