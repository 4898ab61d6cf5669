// Package repo checks the repository itself: what git tracks.
package repo
