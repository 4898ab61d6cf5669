// Package allocator decides, without any Kubernetes client, whether a pod's
// GPU-memory demand fits on a node's cards, which cards it gets, and how
// good each node is for it. The extender, the simulator and the tests all
// drive this package; it holds no state of its own beyond what callers pass.
//
// # Fitting
//
// Every app container (and restartable init container) takes Units on each
// of Cards distinct healthy cards, and these add up on a card. Each init
// container runs alone before them, so on a card the pod reserves the larger
// of its app containers' sum there and its largest init container there.
// Fit searches placements depth-first, largest slices first, trying cards in
// the policy's order and skipping cards that are interchangeable with one
// already tried (same free memory; for a pod whose plain init containers
// follow sidecars, also the same containers on them and the same memory
// free before the pod), and partial placements that already leave such an
// init container too little room, so it finds a placement whenever one
// exists (property tests check this against brute force) and usually takes
// the first path it tries.
//
// The search is bounded twice: each node by its own step budget, and each
// request, over all its nodes, by a Budget (FitBudget): a number of steps
// and the request's context. A demand whose search a budget stops is
// refused with a reason that says so (FitError.Budget), never placed.
//
// # Scoring
//
// Policies order the cards for a slice and score a node after a placement:
//
//   - binpack: fill the fullest cards and nodes first (best fit), keeping
//     whole cards free for large pods.
//   - spread: the emptiest cards and nodes first, limiting interference.
//   - bestfit: the card, and the node, left with the least free memory
//     (with CPU too when the caller knows it): the study's best-fit
//     baseline and the card rule of Aliyun's gpushare extender.
//   - random: any node and card that fit, uniformly.
//   - fgd: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23)
//     for a target workload known in advance.
//   - fragaware (default): the least expected waste for the requests the
//     cluster typically sees, learned online: free memory on partly used
//     cards that those requests will not fill, given how many such cards
//     (Holes) compete for them; for multi-card requests, a capacity model
//     that counts how many the cards, and (given a Host) the CPU and
//     memory, still admit; memory left dead beside exhausted CPU or memory;
//     packing, or spreading under CPU pressure (SetCPUDemand). See
//     FragAware.
//
// BestFit, FGD and FragAware also implement HostScorer: given a node's free
// CPU they weigh it too, and FragAware its free memory (the extender's cache
// and the simulator both pass them).
//
// Node scores are mapped to the extender range 0..10 across the nodes of one
// request by NormalizeScores.
package allocator
