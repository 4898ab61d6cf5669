package cluster

import (
	"time"

	"github.com/gpushare/gpushare/test/supervisor"
)

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// Cmdline returns the argv of a running process from /proc/PID/cmdline;
// an error if there is no such process.
func Cmdline(pid int) ([]string, error) { return supervisor.Cmdline(pid) }
