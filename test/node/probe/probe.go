// Package probe is the format in which the real node's GPU test image
// (test/images/gpuprobe) reports what its container got, its parser, and
// the parser of /proc/self/mountinfo that the image and the node's
// teardown share.
//
//	== gpuprobe
//	uid=0 gid=0
//	== env
//	KEY=value          (one variable a line, sorted)
//	== mounts
//	/dev/shm tmpfs shm (mount point, file system, source; one a line,
//	                    spaces in them written \040 as in mountinfo)
//	== end
package probe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Report is what a container reports about itself.
type Report struct {
	UID, GID int
	// Env is the environment, KEY=value each.
	Env []string
	// Mounts are the container's mounts.
	Mounts []Mount
}

// Mount is one mount of the container.
type Mount struct {
	Target, FSType, Source string
}

// escape writes a mount's fields as mountinfo does: a space, a tab, a
// newline and a backslash as octal escapes, so fields split on spaces.
var escape = strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`)

// Section markers.
const (
	header     = "== gpuprobe"
	envMark    = "== env"
	mountsMark = "== mounts"
	endMark    = "== end"
)

// Write prints r in the package's format. Variables with a newline in their
// value are left out (a line is one variable).
func (r Report) Write(w io.Writer) error {
	env := make([]string, 0, len(r.Env))
	for _, kv := range r.Env {
		if !strings.Contains(kv, "\n") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nuid=%d gid=%d\n%s\n", header, r.UID, r.GID, envMark)
	for _, kv := range env {
		b.WriteString(kv + "\n")
	}
	b.WriteString(mountsMark + "\n")
	for _, m := range r.Mounts {
		fmt.Fprintf(&b, "%s %s %s\n", escape.Replace(m.Target), escape.Replace(m.FSType), escape.Replace(m.Source))
	}
	b.WriteString(endMark + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// ErrIncomplete is returned by Parse for a report without its end marker
// (the container has not written it all yet).
var ErrIncomplete = errors.New("the probe's report is incomplete")

// Parse reads the first report in text (a container's output).
func Parse(text string) (Report, error) {
	var r Report
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch line {
		case header, envMark, mountsMark:
			section = line
			continue
		case endMark:
			if section == "" {
				return r, fmt.Errorf("%w: an end without a start", ErrIncomplete)
			}
			return r, nil
		}
		switch section {
		case header:
			if _, err := fmt.Sscanf(line, "uid=%d gid=%d", &r.UID, &r.GID); err != nil {
				return r, fmt.Errorf("parsing the probe's ids %q: %w", line, err)
			}
		case envMark:
			r.Env = append(r.Env, line)
		case mountsMark:
			f := strings.SplitN(line, " ", 3)
			if len(f) != 3 {
				return r, fmt.Errorf("parsing the probe's mount %q: want TARGET FSTYPE SOURCE", line)
			}
			r.Mounts = append(r.Mounts, Mount{Target: unescape(f[0]), FSType: unescape(f[1]), Source: unescape(f[2])})
		}
	}
	return r, ErrIncomplete
}

// Getenv returns the value of key in r.Env and whether it is set.
func (r Report) Getenv(key string) (string, bool) {
	for _, kv := range r.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Mounted returns the mount at target, if any.
func (r Report) Mounted(target string) (Mount, bool) {
	for _, m := range r.Mounts {
		if m.Target == target {
			return m, true
		}
	}
	return Mount{}, false
}

// ParseMountinfo turns /proc/self/mountinfo into mounts.
func ParseMountinfo(text string) []Mount {
	var out []Mount
	for _, line := range strings.Split(text, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		out = append(out, Mount{Target: unescape(f[4]), FSType: g[0], Source: unescape(g[1])})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
