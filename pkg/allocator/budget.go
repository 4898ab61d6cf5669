package allocator

import (
	"context"
	"errors"
	"fmt"
)

// ErrBudgetSpent is a Budget's error once its steps are spent.
var ErrBudgetSpent = errors.New("search budget spent")

// DefaultRequestSteps is the search steps (placements examined) one request
// may spend over all the nodes it fits. docs/benchmarks.md says what a step
// costs (BenchmarkSearchStep), and so what the budget is in CPU time. A pod
// of a few containers takes tens of steps on a node, so the budget covers
// thousands of nodes. A pod whose containers make the search explode is
// refused instead of holding a core for seconds.
const DefaultRequestSteps = 500_000

// contextCheckSteps is how many steps a Budget takes between two looks at
// its context.
const contextCheckSteps = 1024

// Budget bounds the work of one request across every node it fits. It
// holds a number of search steps, and the request's context: its deadline,
// or the scheduler giving up. A nil *Budget bounds nothing beyond each
// node's own search budget. It is not safe for concurrent use: one request,
// one goroutine.
type Budget struct {
	ctx   context.Context
	steps int64 // the steps given
	left  int64 // steps left
	tick  int   // steps until the context is looked at again
	err   error // why the budget ended; nil while it lasts
}

// NewBudget returns a budget of steps search steps that also ends when ctx
// does.
func NewBudget(ctx context.Context, steps int64) *Budget {
	return &Budget{ctx: ctx, steps: steps, left: steps, tick: contextCheckSteps}
}

// Err returns nil while the budget lasts. Then it returns an error wrapping
// ErrBudgetSpent, or the context's error.
func (b *Budget) Err() error {
	if b == nil {
		return nil
	}
	if b.err == nil && b.ctx != nil {
		if err := b.ctx.Err(); err != nil {
			b.err = fmt.Errorf("request ended: %w", context.Cause(b.ctx))
		}
	}
	return b.err
}

// Spent returns the steps taken.
func (b *Budget) Spent() int64 {
	if b == nil {
		return 0
	}
	return b.steps - b.left
}

// step takes one step and reports whether the budget lasts.
func (b *Budget) step() bool {
	if b == nil {
		return true
	}
	if b.err != nil {
		return false
	}
	if b.left--; b.left < 0 {
		b.err = fmt.Errorf("%w: %d placements examined in this request", ErrBudgetSpent, b.steps)
		return false
	}
	if b.tick--; b.tick <= 0 {
		b.tick = contextCheckSteps
		return b.Err() == nil
	}
	return true
}
