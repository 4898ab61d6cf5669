package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
)

// Value is one documented value of values.yaml: a leaf of its tree.
type Value struct {
	// Key is the dotted path, e.g. "extender.service.port".
	Key string
	// Type is string, int, bool, float, list or object.
	Type string
	// Default is the value as compact JSON.
	Default string
	// Doc is the comment above the key, lines joined by spaces.
	Doc string
}

// Values reads the documented values of a values.yaml: a mapping written in
// block style is a group, and its keys are read one by one, unless none of
// them carries a comment (then the mapping is one value, like resources);
// every other node (a scalar, a list, a flow or empty mapping) is a value.
// A value without a comment is returned with an empty Doc, for the caller
// to refuse.
func Values(data []byte) ([]Value, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parsing values.yaml: %w", err)
	}
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yamlv3.MappingNode {
		return nil, fmt.Errorf("parsing values.yaml: the document is not a mapping")
	}
	var out []Value
	if err := walkValues(doc.Content[0], "", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// walkValues appends the values under the mapping m, whose keys are
// prefixed with prefix.
func walkValues(m *yamlv3.Node, prefix string, out *[]Value) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		path := prefix + key.Value
		if isGroup(val) {
			if err := walkValues(val, path+".", out); err != nil {
				return err
			}
			continue
		}
		var v any
		if err := val.Decode(&v); err != nil {
			return fmt.Errorf("values.yaml %s: %w", path, err)
		}
		def, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("values.yaml %s: %w", path, err)
		}
		*out = append(*out, Value{Key: path, Type: typeOf(v), Default: string(def), Doc: commentText(key.HeadComment)})
	}
	return nil
}

// isGroup says whether n is a block mapping with at least one commented
// key.
func isGroup(n *yamlv3.Node) bool {
	if n.Kind != yamlv3.MappingNode || n.Style&yamlv3.FlowStyle != 0 || len(n.Content) == 0 {
		return false
	}
	for i := 0; i < len(n.Content); i += 2 {
		if n.Content[i].HeadComment != "" || isGroup(n.Content[i+1]) {
			return true
		}
	}
	return false
}

// typeOf names the type of a decoded value.
func typeOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int, int64, uint64:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case []any:
		return "list"
	default:
		return "object"
	}
}

// commentText is a head comment without its "#" marks, one line.
func commentText(c string) string {
	var words []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

// ValuesTable renders values as the Markdown table of the chart's README.
func ValuesTable(values []Value) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n")
	for _, v := range values {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", v.Key, v.Type, cell(v.Default), cell(v.Doc))
	}
	return b.String()
}

// cell escapes what would break a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// valuesOf reads the documented values of a values.yaml file.
func valuesOf(path string) ([]Value, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the chart's values.yaml
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return Values(data)
}

// documentedKey says whether a dotted --set key names a documented value
// or something inside one (an object's field, e.g.
// tls.certManager.issuerRef.name).
func documentedKey(values []Value, key string) bool {
	for _, v := range values {
		if key == v.Key || (strings.HasPrefix(key, v.Key+".") && (v.Type == "object" || v.Type == "list")) {
			return true
		}
	}
	return false
}
