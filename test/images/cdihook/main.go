// Command cdihook is a test-only stand-in for the NVIDIA container
// toolkit's nvidia-cdi-hook, which the real-node tests (test/node) put
// where the real one would be named (the device plugin's --cdi-hook). It
// applies nothing: it records each call, as one JSON line appended to
// calls.jsonl beside its own executable, with its arguments and what it
// would apply to which container: the container's NVIDIA_GPU_MEMORY_LIMIT
// and NVIDIA_GPU_MEMORY_REQUEST (from its OCI spec, whose bundle the
// runtime passes in the container state on stdin) and the pod and
// container names from the CRI's annotations. It exits 0, so the
// container starts.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Call is one line of calls.jsonl.
type Call struct {
	Args      []string `json:"args"`
	ID        string   `json:"id"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	Container string   `json:"container"`
	Limit     string   `json:"limit"`
	Request   string   `json:"request"`
	Err       string   `json:"err,omitempty"`
}

func main() {
	c := Call{Args: os.Args}
	if err := describe(&c); err != nil {
		c.Err = err.Error()
	}
	if err := record(c); err != nil {
		fmt.Fprintln(os.Stderr, "cdihook:", err)
	}
}

// describe fills c from the container state on stdin and the bundle's
// config.json.
func describe(c *Call) error {
	var state struct {
		ID          string            `json:"id"`
		Bundle      string            `json:"bundle"`
		Annotations map[string]string `json:"annotations"`
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the state: %w", err)
	}
	if err := json.Unmarshal(b, &state); err != nil {
		return fmt.Errorf("parsing the state: %w", err)
	}
	c.ID = state.ID
	var spec struct {
		Process struct {
			Env []string `json:"env"`
		} `json:"process"`
		Annotations map[string]string `json:"annotations"`
	}
	b, err = os.ReadFile(filepath.Join(state.Bundle, "config.json"))
	if err != nil {
		return fmt.Errorf("reading the container's spec: %w", err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("parsing the container's spec: %w", err)
	}
	ann := map[string]string{}
	for k, v := range spec.Annotations {
		ann[k] = v
	}
	for k, v := range state.Annotations {
		ann[k] = v
	}
	c.Namespace = ann["io.kubernetes.cri.sandbox-namespace"]
	c.Pod = ann["io.kubernetes.cri.sandbox-name"]
	c.Container = ann["io.kubernetes.cri.container-name"]
	for _, kv := range spec.Process.Env {
		if v, ok := strings.CutPrefix(kv, "NVIDIA_GPU_MEMORY_LIMIT="); ok {
			c.Limit = v
		}
		if v, ok := strings.CutPrefix(kv, "NVIDIA_GPU_MEMORY_REQUEST="); ok {
			c.Request = v
		}
	}
	return nil
}

// record appends c to calls.jsonl beside the executable.
func record(c Call) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(exe), "calls.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
