package gpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// ErrFakeCommand marks a malformed line of a fake-GPU control file.
var ErrFakeCommand = errors.New("invalid fake-GPU command")

// Apply runs one fake-GPU command on f. It is a test-only hook for a
// device plugin that runs as its own process, as in the demo and the
// end-to-end tests, where InjectXID and SetProbeError cannot be called
// directly.
// Cards are named by index. Commands:
//
//	xid INDEX CODE    deliver XID CODE (e.g. 79, fallen off the bus) on card INDEX
//	probe INDEX fail  make the card's health probe fail, so it cannot recover
//	probe INDEX ok    make the probe succeed again
//
// Blank lines and lines starting with # do nothing.
func (f *Fake) Apply(line string) error {
	fields := strings.Fields(line)
	if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s; want \"xid INDEX CODE\" or \"probe INDEX fail|ok\"", ErrFakeCommand, line, why)
	}
	if len(fields) != 3 {
		return bad(fmt.Sprintf("has %d words", len(fields)))
	}
	idx, err := strconv.Atoi(fields[1])
	if err != nil || idx < 0 || idx >= len(f.devices) {
		return bad(fmt.Sprintf("names card %s; this node has cards 0..%d", fields[1], len(f.devices)-1))
	}
	uuid := f.devices[idx].UUID
	switch fields[0] {
	case "xid":
		code, err := strconv.ParseUint(fields[2], 10, 64)
		if err != nil || code == 0 {
			return bad("has no positive XID code")
		}
		f.InjectXID(uuid, code)
	case "probe":
		switch fields[2] {
		case "fail":
			f.SetProbeError(uuid, fmt.Errorf("card %d made to fail by a fake-GPU command", idx))
		case "ok":
			f.SetProbeError(uuid, nil)
		default:
			return bad("probe takes fail or ok")
		}
	default:
		return bad("unknown command " + fields[0])
	}
	return nil
}

// FollowControl polls path every period until ctx ends. Whenever the file
// exists it is renamed away, so a writer may create it again at once. Each
// of its lines is applied with Apply, then it is removed. Writers should
// create it atomically, writing elsewhere and renaming, and wait for it to
// disappear before writing the next one. A bad line is logged and skipped.
func (f *Fake) FollowControl(ctx context.Context, path string, period time.Duration) {
	logger := klog.FromContext(ctx).WithValues("controlFile", path)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		taken := path + ".applying"
		if err := os.Rename(path, taken); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				logger.Error(err, "Taking the fake-GPU control file")
			}
			continue
		}
		lines, err := readLines(taken)
		_ = os.Remove(taken)
		if err != nil {
			logger.Error(err, "Reading the fake-GPU control file")
			continue
		}
		for _, line := range lines {
			if err := f.Apply(line); err != nil {
				logger.Error(err, "Skipping a fake-GPU command")
				continue
			}
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				logger.Info("Applied a fake-GPU command", "command", l)
			}
		}
	}
}

func readLines(path string) ([]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	var out []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}
