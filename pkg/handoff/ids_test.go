package handoff

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDeviceID(t *testing.T) {
	const uuid = "GPU-8f1c2a3b-0000-1111-2222-333344445555"
	tests := []struct {
		name     string
		id       string
		wantUUID string
		wantK    int64
		wantErr  string
	}{
		{name: "first unit", id: uuid + "::0", wantUUID: uuid, wantK: 0},
		{name: "large unit", id: uuid + "::81919", wantUUID: uuid, wantK: 81919},
		{name: "no separator", id: uuid, wantErr: `has no "::"`},
		{name: "empty UUID", id: "::3", wantErr: "does not have the form"},
		{name: "extra separator", id: uuid + "::1::2", wantErr: "does not have the form"},
		{name: "comma in UUID", id: "GPU-a,b::1", wantErr: "does not have the form"},
		{name: "no number", id: uuid + "::", wantErr: "does not end in a unit number"},
		{name: "leading zero", id: uuid + "::01", wantErr: "does not end in a unit number"},
		{name: "sign", id: uuid + "::-1", wantErr: "does not end in a unit number"},
		{name: "plus sign", id: uuid + "::+1", wantErr: "does not end in a unit number"},
		{name: "letters", id: uuid + "::1a", wantErr: "does not end in a unit number"},
		{name: "too large", id: uuid + "::99999999999", wantErr: "does not end in a unit number"},
		{name: "too long", id: strings.Repeat("G", 200) + "::1", wantErr: "limit 128"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uuid, k, err := ParseDeviceID(tc.id)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrDeviceID) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseDeviceID(%q) error = %v, want ErrDeviceID containing %q", tc.id, err, tc.wantErr)
				}
				return
			}
			if err != nil || uuid != tc.wantUUID || k != tc.wantK {
				t.Fatalf("ParseDeviceID(%q) = %q, %d, %v; want %q, %d", tc.id, uuid, k, err, tc.wantUUID, tc.wantK)
			}
			if got := DeviceID(uuid, k); got != tc.id {
				t.Errorf("DeviceID(%q, %d) = %q, want %q", uuid, k, got, tc.id)
			}
		})
	}
}

// FuzzParseDeviceID checks that the parser accepts exactly the IDs
// DeviceID makes: whatever parses formats back to the same string.
func FuzzParseDeviceID(f *testing.F) {
	for _, s := range []string{"GPU-8f1c::0", "GPU-x::81919", "::", "a::01", "a::-1", "a::1::2", "a,b::3", "GPU::2147483647", "GPU::2147483648"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		uuid, k, err := ParseDeviceID(id)
		if err != nil {
			if !errors.Is(err, ErrDeviceID) {
				t.Fatalf("error %v does not wrap ErrDeviceID", err)
			}
			return
		}
		if got := DeviceID(uuid, k); got != id {
			t.Fatalf("ParseDeviceID(%q) = %q, %d, which formats as %q", id, uuid, k, got)
		}
	})
}
