// Package view is the cache as its readers see it without the lock: the
// published copy of each node and of the policy's inputs, and the verbs
// that read only them.
package view
