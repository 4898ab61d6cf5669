// Package nodeagent keeps what the device plugin publishes about its node
// true: the inventory annotation, the card labels and the idle-GPU taint.
package nodeagent
