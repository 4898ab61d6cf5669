package trace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// LoadTrace reads the nodes and the pods of a trace, each in openb CSV or
// Kubernetes YAML/JSON (told apart by the extension, else the content). A
// Kubernetes dump named by both (`--nodes cluster.yaml --pods
// cluster.yaml`) is read and decoded once.
func LoadTrace(nodesFile, podsFile string) (*Trace, error) {
	var kube struct {
		file  string
		nodes []Node
		pods  []Pod
	}
	read := func(file string) (csv io.Reader, err error) {
		if file == kube.file {
			return nil, nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if isCSV(file, data) {
			return bytes.NewReader(data), nil
		}
		kube.file = file
		kube.nodes, kube.pods, err = ReadKubernetes(bytes.NewReader(data), file)
		return nil, err
	}
	tr := &Trace{}
	csv, err := read(nodesFile)
	switch {
	case err != nil:
		return nil, err
	case csv != nil:
		tr.Nodes, err = ReadOpenbNodes(csv, nodesFile)
	case len(kube.nodes) == 0:
		err = &InputError{File: nodesFile, Err: errors.New("no Node objects")}
	default:
		tr.Nodes = kube.nodes
	}
	if err != nil {
		return nil, err
	}
	csv, err = read(podsFile)
	switch {
	case err != nil:
		return nil, err
	case csv != nil:
		tr.Pods, err = ReadOpenbPods(csv, podsFile)
	case len(kube.pods) == 0:
		err = &InputError{File: podsFile, Err: errors.New("no Pod objects (finished pods are left out)")}
	default:
		tr.Pods = kube.pods
	}
	if err != nil {
		return nil, err
	}
	return tr, nil
}

// isCSV tells openb CSV from YAML/JSON: by extension, else by whether the
// first line looks like a CSV header.
func isCSV(name string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return true
	case ".yaml", ".yml", ".json":
		return false
	}
	first, _, _ := bytes.Cut(bytes.TrimLeft(data, "\ufeff \t\r\n"), []byte("\n"))
	return bytes.Count(first, []byte(",")) >= 3 && !bytes.ContainsAny(first, ":{")
}
