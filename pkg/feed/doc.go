// Package feed keeps a cache in step with the API through shared informers.
package feed
