package gpushare

// TaintIdleGPUs is the key of the taint, effect PreferNoSchedule and no
// value, that the device plugin keeps on a node of at least
// DefaultIdleTaintMinCards cards while none of them holds any pod's GPU
// memory. Every kube-scheduler's TaintToleration scores a pod lower there
// unless it tolerates the taint, and by default none does. Pods that ask no
// GPU memory thus prefer nodes whose cards are in use, and whole idle
// multi-card nodes stay free for pods that need several cards. The taint is
// a field of the Node: no gpushare component is in those pods' path.
const TaintIdleGPUs = "gpushare.io/idle-gpus"

// DefaultIdleTaintMinCards is the fewest cards a node needs to be tainted
// idle: 4, where multi-card pods need whole idle nodes. Tainting 2-card nodes
// too sends pods without GPU memory onto nodes with busy cards and little
// CPU; docs/design/policies.md has the simulator's figures.
const DefaultIdleTaintMinCards = 4

// WantsIdleTaint reports whether a node of cards cards carries
// TaintIdleGPUs. idle says whether none of them holds GPU memory. minCards
// is the threshold; 0 turns the taint off.
func WantsIdleTaint(cards, minCards int, idle bool) bool {
	return minCards > 0 && cards >= minCards && idle
}
