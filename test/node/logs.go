package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ContainerLog returns what the latest run of a container of the pod
// (namespace, name, uid) on the node wrote, stdout and stderr interleaved
// as written, read from the file containerd writes for kubelet:
// <PodLogsDir>/<namespace>_<name>_<uid>/<container>/<restarts>.log. It also
// returns the run's number (0 for the first, as restartCount counts).
func (n *Node) ContainerLog(namespace, name, uid, container string) (text string, run int, err error) {
	return ContainerLog(namespace, name, uid, container)
}

// ContainerLog is Node.ContainerLog for the machine's one node, from
// another process than the one that runs it (make node-demo's status).
func ContainerLog(namespace, name, uid, container string) (text string, run int, err error) {
	dir := filepath.Join(layout{data: DataDir}.podLogsDir(), namespace+"_"+name+"_"+uid, container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", 0, fmt.Errorf("reading the logs of container %s of pod %s/%s: %w", container, namespace, name, err)
	}
	run = -1
	for _, e := range entries {
		if i, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log")); err == nil && strings.HasSuffix(e.Name(), ".log") && i > run {
			run = i
		}
	}
	if run < 0 {
		return "", 0, fmt.Errorf("reading the logs of container %s of pod %s/%s: %w", container, namespace, name, os.ErrNotExist)
	}
	b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(run)+".log"))
	if err != nil {
		return "", run, fmt.Errorf("reading the logs of container %s of pod %s/%s: %w", container, namespace, name, err)
	}
	text, err = ParseCRILog(string(b))
	return text, run, err
}

// ErrBadCRILog is returned for a line that is not in the CRI log format.
var ErrBadCRILog = errors.New("not a CRI log line")

// ParseCRILog returns the text of a CRI log file, whose every line is
// "TIMESTAMP STREAM TAG CONTENT": STREAM is stdout or stderr, TAG F for a
// line's end and P for a part the runtime split off a long line (joined
// to the next without a newline).
func ParseCRILog(data string) (string, error) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 || (f[1] != "stdout" && f[1] != "stderr") {
			return b.String(), fmt.Errorf("%w: %q", ErrBadCRILog, line)
		}
		content := ""
		if len(f) == 4 {
			content = f[3]
		}
		b.WriteString(content)
		if !strings.HasPrefix(f[2], "P") {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}
