package deviceplugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// aliyunIDs returns n device IDs in the format of Aliyun's device plugin,
// "<UUID>-_-<k>", k = from .. from+n-1, sorted as strings.
func aliyunIDs(uuid string, from, n int) []string {
	var out []string
	for k := from; k < from+n; k++ {
		out = append(out, fmt.Sprintf("%s-_-%d", uuid, k))
	}
	slices.Sort(out)
	return out
}

// TestServerAdvertisesAdoptedDevices: adopted IDs replace as many of
// their card's own units, carry its health, and come back out when the
// adoption ends.
func TestServerAdvertisesAdoptedDevices(t *testing.T) {
	s := NewServer(testLogger(t), nil, testCards[:2], gpushare.UnitGiB, StrategyEnvvar, nil)
	type card struct{ Own, Adopted, Unhealthy int }
	count := func() map[string]card {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := map[string]card{}
		for _, d := range s.devices {
			key := ""
			c := card{}
			if uuid, _, err := handoff.ParseDeviceID(d.ID); err == nil {
				key, c.Own = uuid, 1
			} else {
				key, c.Adopted = strings.SplitN(d.ID, "-_-", 2)[0]+" (adopted)", 1
			}
			if d.Health == pluginapi.Unhealthy {
				c.Unhealthy = 1
			}
			o := out[key]
			out[key] = card{o.Own + c.Own, o.Adopted + c.Adopted, o.Unhealthy + c.Unhealthy}
		}
		return out
	}
	steps := []struct {
		name      string
		adopted   map[string][]string
		unhealthy map[string]bool
		want      map[string]card
	}{
		{name: "none", want: map[string]card{"GPU-0": {Own: 16}, "GPU-1": {Own: 16}}},
		{name: "6 IDs of another card's UUID adopted on GPU-0", adopted: map[string][]string{"GPU-0": aliyunIDs("GPU-1", 0, 6)},
			want: map[string]card{"GPU-0": {Own: 10}, "GPU-1 (adopted)": {Adopted: 6}, "GPU-1": {Own: 16}}},
		{name: "GPU-0 unhealthy: adopted IDs too", adopted: map[string][]string{"GPU-0": aliyunIDs("GPU-1", 0, 6)}, unhealthy: map[string]bool{"GPU-0": true},
			want: map[string]card{"GPU-0": {Own: 10, Unhealthy: 10}, "GPU-1 (adopted)": {Adopted: 6, Unhealthy: 6}, "GPU-1": {Own: 16}}},
		{name: "more adopted than units", adopted: map[string][]string{"GPU-1": aliyunIDs("GPU-1", 0, 20)},
			want: map[string]card{"GPU-0": {Own: 16}, "GPU-1 (adopted)": {Adopted: 20}}},
		{name: "adoption over", want: map[string]card{"GPU-0": {Own: 16}, "GPU-1": {Own: 16}}},
	}
	for _, st := range steps {
		s.SetHealth(st.unhealthy)
		s.SetAdopted(st.adopted)
		if diff := cmp.Diff(st.want, count()); diff != "" {
			t.Errorf("%s: devices mismatch (-want +got):\n%s", st.name, diff)
		}
	}
}
