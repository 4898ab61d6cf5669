// Package allocator decides whether a pod's GPU-memory demand fits on a
// node's cards, which cards it gets, and how good each node is for it.
//
// It uses no Kubernetes client and holds no state beyond what callers pass.
// The extender, the simulator and the tests all drive it.
//
// A container takes Units on each of Cards distinct healthy cards. Fit and
// FitBudget search the placements, and a Budget bounds one request's search
// over all its nodes. A Policy orders the cards for a slice and scores a
// node after a placement. New builds a policy by name; FragAware is the
// default. NormalizeScores maps a request's node scores to the extender's
// range, 0..10.
//
// docs/design/fit.md describes the search and its bounds.
// docs/design/policies.md describes and compares the policies.
package allocator
