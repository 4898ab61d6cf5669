// Package leader decides when one extender replica of several may place
// pods, so that two replicas never hand out the same card.
//
// Two topologies are covered. Standalone replicas behind one Service
// (--leader-elect) elect a leader with a coordination.k8s.io Lease of their
// own (Elect). Only the leader reports ready on /readyz, so the Service
// sends kube-scheduler to it, and only the leader answers filter,
// prioritize and bind. In the sidecar topology each kube-scheduler replica
// calls the extender beside it on localhost, and kube-scheduler's own
// leader election decides who schedules. The sidecar follows the
// scheduler's Lease (--follow-scheduler-lease, Follow). It serves while the
// holder is its own pod's scheduler. A replica that is not serving answers
// the verbs with 503 and Retry-After. kube-scheduler reports that as an
// extender error: the pod goes back to its queue and is retried with
// backoff.
//
// A Gate holds the state both share:
//
//	          lease becomes ours                catch-up done
//	(follower) ──────────────────► catching up ───────────────► serving
//	    ▲                              │                           │
//	    └──────── lease lost (not renewed by its renew deadline,  ─┘
//	              or held by another identity): term ends,
//	              in-flight Bindings are cancelled
//
// # Safety
//
// Claim: a card the previous leader charged to a pod whose Binding the API
// server made is never charged to another pod by the new leader.
//
// The new leader's informers may lag (a watch gap, a slow relist). The pod
// the old leader bound may still show as pending there, its card free. Two
// steps close that window.
//
// 1. Fencing: the old leader stops first. Every Binding write runs under
// Gate.Fence, which refuses it unless this replica leads and has caught
// up. Fence gives it a deadline of R + RenewDeadline, where R is the time
// of the last successful renewal. R is read from this replica's clock
// before the renewal was sent. For a followed Lease, R is its
// spec.renewTime, which the scheduler on the same host writes. The write is
// also cancelled when the term ends. Another replica can take the Lease
// only after it has seen the same record unchanged for LeaseDuration on its
// own clock, which is later than R + LeaseDuration. So every Binding of the
// old leader's has ended, as its client sees it, LeaseDuration -
// RenewDeadline before the new leader holds the Lease. With the defaults,
// 15 s and 10 s, that is 5 s.
//
// 2. Catch-up: the new leader reads the truth before it decides. On
// becoming leader, before it serves, the replica lists every bound,
// unfinished pod with a quorum read, and applies each to its cache
// (feed.Feeder.CatchUp). The read's resourceVersion "" is served from etcd,
// not from a watch cache. So the list reflects every write committed before
// it began, and every Binding of the old leader's. The cache keeps each
// listed pod's resourceVersion as a floor. The lagging informer's older
// events of that pod (still pending) are ignored until it catches up.
// Informer events newer than the list that arrive during it win over it.
//
// Together: every Binding of the old leader's committed before the new
// leader's list began. It ended LeaseDuration - RenewDeadline before the
// Lease changed hands, and the list starts after that. So the list shows
// it, and the new leader charges its card. The old leader's assumptions
// whose Binding was never made hold no card in the API and need none.
//
// Timing assumptions, the margin LeaseDuration - RenewDeadline covers:
//   - clock rates: the replicas' clocks may be offset but run at nearly the
//     same rate, as client-go's leader election also assumes;
//   - a Binding request the client gave up on is applied by the API server
//     within the margin or not at all. The client's deadline cancels the
//     request, whose storage write then fails. A write already handed to
//     etcd commits within milliseconds;
//   - a followed Lease's renewTime is written by the clock of the host the
//     sidecar runs on (same pod).
//
// A replica that stops without releasing the Lease (a crash, SIGKILL) is
// replaced after LeaseDuration. One that stops cleanly releases it
// (ReleaseOnCancel), and the next takes over at once, still catching up
// first.
package leader
