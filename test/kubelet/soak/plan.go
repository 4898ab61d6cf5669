package soak

import (
	"math/rand/v2"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault, in the order the output lists them.
const (
	KindExtenderKill   Kind = "extender-kill"   // SIGKILL the extender, start it again
	KindSchedulerKill  Kind = "scheduler-kill"  // SIGKILL kube-scheduler, start it again
	KindPluginKill     Kind = "plugin-kill"     // SIGKILL a node's device plugin, start it again
	KindKubeletRestart Kind = "kubelet-restart" // restart a node's device manager (kubelet.sock re-created)
	KindAPIServerPause Kind = "apiserver-pause" // SIGSTOP kube-apiserver, SIGCONT after a few seconds
	KindCardUnhealthy  Kind = "card-unhealthy"  // a card unhealthy for a few seconds, then healthy
)

// Kinds are all kinds of fault.
var Kinds = []Kind{KindExtenderKill, KindSchedulerKill, KindPluginKill, KindKubeletRestart, KindAPIServerPause, KindCardUnhealthy}

// Step is one fault the plan asks for.
type Step struct {
	Kind Kind
	// Target is the index of the target among the kind's targets.
	Target int
	// Card is the card index, for KindCardUnhealthy.
	Card int
	// Hold is how long the fault lasts: down time of a killed process,
	// pause of the API server, time a card stays unhealthy; for a kubelet
	// restart, a wait after it.
	Hold time.Duration
	// Gap is the quiet time after the fault is healed.
	Gap time.Duration
}

// holds are the ranges Step.Hold is drawn from, per kind.
var holds = map[Kind][2]time.Duration{
	KindExtenderKill:   {200 * time.Millisecond, 2 * time.Second},
	KindSchedulerKill:  {200 * time.Millisecond, 2 * time.Second},
	KindPluginKill:     {200 * time.Millisecond, 2 * time.Second},
	KindKubeletRestart: {500 * time.Millisecond, 2 * time.Second},
	KindAPIServerPause: {2 * time.Second, 5 * time.Second},
	KindCardUnhealthy:  {2 * time.Second, 6 * time.Second},
}

// Planner draws the faults from a seed: kinds are dealt from shuffled
// decks holding each kind with targets once, so every kind comes up once
// in every len(kinds) faults; targets, cards and durations are drawn
// uniformly.
type Planner struct {
	rng     *rand.Rand
	kinds   []Kind
	targets Targets
	// deck holds the kinds still to deal before the next shuffle.
	deck []Kind
	// maxGap bounds Step.Gap.
	maxGap time.Duration
}

// NewPlanner returns the planner of seed over targets; kinds without a
// target are never dealt.
func NewPlanner(seed uint64, targets Targets, maxGap time.Duration) *Planner {
	p := &Planner{rng: rand.New(rand.NewPCG(seed, 0xfa17)), targets: targets, maxGap: maxGap}
	for _, k := range Kinds {
		if targets.count(k) > 0 {
			p.kinds = append(p.kinds, k)
		}
	}
	return p
}

// Next returns the next fault.
func (p *Planner) Next() Step {
	if len(p.deck) == 0 {
		p.deck = append(p.deck, p.kinds...)
		p.rng.Shuffle(len(p.deck), func(i, j int) { p.deck[i], p.deck[j] = p.deck[j], p.deck[i] })
	}
	k := p.deck[0]
	p.deck = p.deck[1:]
	s := Step{Kind: k, Target: p.rng.IntN(p.targets.count(k))}
	if k == KindCardUnhealthy {
		s.Card = p.rng.IntN(p.targets.Cards[s.Target].Count())
	}
	h := holds[k]
	s.Hold = h[0] + time.Duration(p.rng.Int64N(int64(h[1]-h[0])))
	s.Gap = time.Duration(p.rng.Int64N(int64(p.maxGap) + 1))
	return s
}
