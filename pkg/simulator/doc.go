// Package simulator replays a trace of pods on a cluster with each
// allocator policy, so that a user can tell which policy suits a cluster
// before deploying it.
//
// The gpushare-simulate program runs it (package cli). It runs the
// extender's own code: allocator.Fit places a pod on a node's cards, and
// the policy's NodeScore rates the node (NodeScoreHost where the policy
// weighs CPU and memory). The default policy learns the typical requests
// online with workload.Workload, as the extender's cache does.
//
// # Methodology
//
// It follows the FGD study (Weng et al., "Beware of Fragmentation", USENIX
// ATC '23), so that figures are comparable with it:
//
//   - The pods are sorted by name and shuffled with the seed. Then clones
//     of pods drawn uniformly are appended until the pods' GPU demand first
//     passes 130% of the cluster's GPU capacity (Arrivals).
//   - They are submitted one by one. A node may take a pod if two things
//     hold, as in the extender's filter. The pod's CPU and memory requests
//     fit the node's free allocatable ones, as kube-scheduler's
//     NodeResourcesFit would have them. And allocator.FitWith places the
//     GPU memory on cards the pod may use (allocator.Exclude: openb
//     gpu_spec as exact model names, a Kubernetes pod's gpushare.io/gpu-*
//     annotations, no cordoned card). The node with the highest score wins.
//     A generator seeded from the seed breaks ties, so a run is
//     reproducible. A pod that fits nowhere is failed and skipped. Nothing
//     departs.
//   - kube-scheduler's node sampling is replayed (percentageOfNodesToScore,
//     default DefaultPercentageOfNodesToScore, what we ship). A node must
//     first pass kube-scheduler's own filters: CPU, memory, and total free
//     GPU memory. Which cards a pod may use is the extender's business, so
//     a node of other models still counts. Above 100 nodes a scheduling
//     cycle stops at NodesToFind of those, walked from a start index that
//     rotates as kube-scheduler's does. The policy chooses among them only.
//     A pod whose cards fit on none of them takes another cycle at once,
//     until every node was examined (see replay.submit).
//   - Pods that ask no GPU memory are placed as the replayed topology
//     places them (CPUPodsPlace, the default; ForTopology). kube-scheduler's
//     own scores place them: NodeResourcesFit, balanced allocation, and
//     TaintToleration over the device plugin's gpushare.io/idle-gpus taint.
//     Those scores come from the given configuration in the extender
//     topology. In the second-scheduler one they are kube-scheduler's
//     defaults, as the cluster's own scheduler places these pods there. No
//     shipped configuration sends them to the extender; --scheduler-config
//     replays an opt-in one that does. CPUPodsSkip leaves them out.
//   - "Allocation at X%" is the mean allocated share of GPU capacity over
//     the pods submitted while the arrived GPU demand (failed pods
//     included) rounds to X% of capacity (Result.AllocAt).
//   - Fragmentation is FGD's measure for the trace's target workload: the
//     free GPU memory that a typical task could not use, in percent of
//     capacity, when arrival first reaches a mark.
//
// With openb traces a card is 1000 units. A sharing task asks gpu_milli
// units of one card, and a task with num_gpu = k > 1 asks k whole cards.
// With Kubernetes YAML, units are the nodes' (GiB or MiB).
//
// # Policies
//
// random, spread, binpack, bestfit and fgd are the study's baselines. fgd
// is built from the whole trace's task distribution, as the study does,
// and weighs CPU. fragaware, the default, is described in
// allocator.FragAware. What each allocates on the openb traces is in
// docs/design/policies.md, with its command.
package simulator
