package cluster

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// Cmdline returns the argv of a running process from /proc/PID/cmdline;
// an error if there is no such process.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, fmt.Errorf("pid %d has exited (zombie or kernel thread)", pid)
	}
	return strings.Split(string(b), "\x00"), nil
}
