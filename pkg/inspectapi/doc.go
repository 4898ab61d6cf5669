// Package inspectapi is the JSON of the extender's GET /inspect, which the
// kubectl plugin and the tests read.
package inspectapi
