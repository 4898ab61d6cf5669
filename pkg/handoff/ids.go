package handoff

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// IDSeparator joins a card's UUID and a unit's number in a device ID.
const IDSeparator = "::"

// maxIDBytes bounds the device IDs we parse (a UUID is 40 bytes).
const maxIDBytes = 128

// ErrDeviceID marks a device ID that this plugin did not advertise.
var ErrDeviceID = errors.New("invalid gpushare device ID")

// DeviceID names unit k, 0-based, of the card with this UUID: unit 3 of
// card GPU-8f1c… is "GPU-8f1c…::3". The card is in the ID itself, so the IDs
// kubelet passes to Allocate say which card they are on. kubelet's own
// accounting gives each ID to at most one container. It thus caps every
// card at the number of IDs it has: its memory in units.
func DeviceID(uuid string, k int64) string {
	return uuid + IDSeparator + strconv.FormatInt(k, 10)
}

// ParseDeviceID splits a DeviceID into the card's UUID and the unit number.
// It accepts only the canonical form: a non-empty UUID without separators,
// spaces or commas, and a decimal number without sign or leading zeros.
func ParseDeviceID(id string) (uuid string, k int64, err error) {
	if len(id) > maxIDBytes {
		return "", 0, fmt.Errorf("%w: %d bytes, limit %d", ErrDeviceID, len(id), maxIDBytes)
	}
	uuid, num, ok := strings.Cut(id, IDSeparator)
	switch {
	case !ok:
		return "", 0, fmt.Errorf("%w: %q has no %q", ErrDeviceID, id, IDSeparator)
	case uuid == "" || strings.Contains(num, ":") || strings.ContainsAny(uuid, ":, \t\n"):
		return "", 0, fmt.Errorf("%w: %q does not have the form UUID::N", ErrDeviceID, id)
	case num == "" || (len(num) > 1 && num[0] == '0') || num[0] < '0' || num[0] > '9':
		return "", 0, fmt.Errorf("%w: %q does not end in a unit number", ErrDeviceID, id)
	}
	k, err = strconv.ParseInt(num, 10, 32)
	if err != nil || k < 0 {
		return "", 0, fmt.Errorf("%w: %q does not end in a unit number", ErrDeviceID, id)
	}
	return uuid, k, nil
}
