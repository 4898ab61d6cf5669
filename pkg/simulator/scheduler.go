package simulator

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// Scheduler is what a replay follows of a kube-scheduler configuration
// (KubeSchedulerConfiguration v1, kube-scheduler v1.34 to v1.37:
// ForKubernetes). That is how many nodes a scheduling cycle samples, how
// kube-scheduler's own score plugins rank the nodes, and which pods go
// through the gpushare extender.
//
// Of kube-scheduler's default score plugins, only three tell the nodes of
// a replay apart: NodeResourcesFit, NodeResourcesBalancedAllocation, and
// TaintToleration for the device plugin's gpushare.io/idle-gpus taint. The
// others (NodeAffinity, PodTopologySpread, InterPodAffinity,
// ImageLocality, VolumeBinding, DynamicResources) score every node alike
// when nodes have no images or volumes and pods no affinities or spread
// constraints. So a replay leaves them out. A real cluster's images, other
// taints and affinities make its choices differ from the replay's.
type Scheduler struct {
	// PercentageOfNodesToScore of the profile that schedules the pods; 0 is
	// adaptive (see NodesToFind).
	PercentageOfNodesToScore int32
	// FitWeight is NodeResourcesFit's score weight, 0 when it does not score.
	// Fit is its scoring strategy.
	FitWeight int64
	Fit       ScoringStrategy
	// BalancedWeight is NodeResourcesBalancedAllocation's score weight, 0 when
	// it does not score. BalancedResources are the resources it balances.
	BalancedWeight    int64
	BalancedResources []string
	// TaintWeight is TaintToleration's score weight, 0 when it does not
	// score.
	TaintWeight int64
	// BalanceGain is NodeResourcesBalancedAllocation's score of kube-scheduler
	// 1.36 and later (ForKubernetes): how much the pod improves the node's
	// balance, 50 + (50 + after - before)/2. 1.34 and 1.35 score the balance
	// once the pod is there.
	BalanceGain bool
	// GPUPrioritizeWeight is the weight of the gpushare extender's prioritize
	// scores for pods that ask GPU memory. The scores are 0..10, scaled by 10
	// to kube-scheduler's 0..100. It is 0 when no extender entry that gets
	// those pods has a prioritizeVerb. CPUPrioritizeWeight is the same for
	// pods that ask none; an entry without managedResources gets every pod.
	GPUPrioritizeWeight, CPUPrioritizeWeight int64
	// CPU, when set, is another kube-scheduler that places the pods asking no
	// GPU memory, with its own node sampling. That is the second-scheduler
	// topology, where the cluster's own scheduler places them. With nil, this
	// one places them too.
	CPU *Scheduler
}

// Topology is how the chart deploys gpushare (values.yaml, topology). It
// decides which kube-scheduler places which pods.
type Topology string

const (
	// TopologyExtender: the cluster's kube-scheduler, configured as
	// config/kube-scheduler-config.yaml is (ShippedScheduler), places every
	// pod.
	TopologyExtender Topology = "extender"
	// TopologySecondScheduler: the chart's own kube-scheduler, with the same
	// extender entries, places the pods that ask GPU memory. The cluster's
	// kube-scheduler places the others, with its defaults
	// (DefaultKubeScheduler).
	TopologySecondScheduler Topology = "second-scheduler"
)

// Topologies lists the topologies the chart ships.
var Topologies = []Topology{TopologyExtender, TopologySecondScheduler}

// DefaultKubeScheduler is kube-scheduler v1.34 with its default
// configuration and no extender. It places the pods that ask no GPU memory
// in the second-scheduler topology.
var DefaultKubeScheduler = Scheduler{
	Fit:               ScoringStrategy{Type: LeastAllocated, Resources: defaultResources},
	FitWeight:         defaultFitWeight,
	BalancedWeight:    defaultBalancedWeight,
	BalancedResources: []string{resourceCPU, resourceMemory},
	TaintWeight:       defaultTaintWeight,
}

// DefaultKubeSchedulerMinor is the kube-scheduler minor version (1.x) that
// a replay models unless told otherwise (cli.Config.KubeSchedulerMinor,
// --kube-scheduler-version). The placement figures in docs/ are of it.
const DefaultKubeSchedulerMinor = 34

// BalanceGainMinor is the first kube-scheduler minor version (1.x) whose
// NodeResourcesBalancedAllocation scores the gain in balance.
const BalanceGainMinor = 36

// ForKubernetes returns s as kube-scheduler 1.minor scores (BalanceGain),
// its CPU scheduler too. The configuration files are the same across
// versions; the scoring code is not.
func (s Scheduler) ForKubernetes(minor int) *Scheduler {
	s.BalanceGain = minor >= BalanceGainMinor
	if s.CPU != nil {
		s.CPU = s.CPU.ForKubernetes(minor)
	}
	return &s
}

// ForTopology returns what a replay of topology t follows. gpu is the
// kube-scheduler that places the pods asking GPU memory; nil is
// ShippedScheduler. The cluster's own kube-scheduler of the
// second-scheduler topology scores as gpu's version does (BalanceGain).
func ForTopology(t Topology, gpu *Scheduler) (*Scheduler, error) {
	if gpu == nil {
		gpu = &ShippedScheduler
	}
	switch t {
	case TopologyExtender, "":
		return gpu, nil
	case TopologySecondScheduler:
		s := *gpu
		cpu := DefaultKubeScheduler // of the same version as gpu's
		cpu.BalanceGain = gpu.BalanceGain
		s.CPU = &cpu
		return &s, nil
	}
	return nil, fmt.Errorf("topology %q: want %s or %s", t, TopologyExtender, TopologySecondScheduler)
}

// ScoringStrategy is NodeResourcesFit's scoringStrategy.
type ScoringStrategy struct {
	// Type is LeastAllocated, MostAllocated or RequestedToCapacityRatio.
	Type      string
	Resources []ResourceWeight
	// Shape is RequestedToCapacityRatio's: utilization 0..100 to score 0..10,
	// utilizations ascending.
	Shape []ShapePoint
}

// ResourceWeight is a resource a strategy scores, with its weight.
type ResourceWeight struct {
	Name   string
	Weight int64
}

// ShapePoint is a point of RequestedToCapacityRatio's shape.
type ShapePoint struct {
	Utilization, Score int64
}

// Scoring strategy types (kube-scheduler's ScoringStrategyType).
const (
	LeastAllocated           = "LeastAllocated"
	MostAllocated            = "MostAllocated"
	RequestedToCapacityRatio = "RequestedToCapacityRatio"
)

// kube-scheduler's names and defaults: v1.34's apis/config/v1
// default_plugins.go and defaults.go, and util/pod_resources.go.
const (
	pluginFit      = "NodeResourcesFit"
	pluginBalanced = "NodeResourcesBalancedAllocation"
	pluginTaint    = "TaintToleration"
	// defaultFitWeight, defaultBalancedWeight and defaultTaintWeight: the
	// default profile's MultiPoint weights of the three plugins.
	defaultFitWeight      = 1
	defaultBalancedWeight = 1
	defaultTaintWeight    = 3
	// maxNodeScore is a score plugin's best score. An extender's
	// (extenderv1.MaxExtenderPriority) is 10.
	maxNodeScore       = 100
	maxExtenderScore   = 10
	maxShapeScore      = 10
	resourceCPU        = "cpu"
	resourceMemory     = "memory"
	defaultSchedulerID = "default-scheduler"
)

// defaultResources is what NodeResourcesFit scores and
// NodeResourcesBalancedAllocation balances when not told otherwise.
var defaultResources = []ResourceWeight{{resourceCPU, 1}, {resourceMemory, 1}}

// ShippedScheduler is what config/kube-scheduler-config.yaml sets, and so
// what a replay follows unless told otherwise. TestShippedScheduler keeps
// the two in step.
var ShippedScheduler = Scheduler{
	PercentageOfNodesToScore: DefaultPercentageOfNodesToScore,
	FitWeight:                defaultFitWeight,
	Fit:                      ScoringStrategy{Type: LeastAllocated, Resources: defaultResources},
	BalancedWeight:           defaultBalancedWeight,
	BalancedResources:        []string{resourceCPU, resourceMemory},
	TaintWeight:              defaultTaintWeight,
}

// schedulerConfig is the part of KubeSchedulerConfiguration v1 that
// ReadSchedulerConfig reads.
type schedulerConfig struct {
	Kind                     string           `json:"kind"`
	PercentageOfNodesToScore *int32           `json:"percentageOfNodesToScore"`
	Profiles                 []profileConfig  `json:"profiles"`
	Extenders                []extenderConfig `json:"extenders"`
}

type profileConfig struct {
	SchedulerName            *string        `json:"schedulerName"`
	PercentageOfNodesToScore *int32         `json:"percentageOfNodesToScore"`
	Plugins                  *pluginsConfig `json:"plugins"`
	PluginConfig             []struct {
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	} `json:"pluginConfig"`
}

type pluginsConfig struct {
	MultiPoint pluginSet `json:"multiPoint"`
	Score      pluginSet `json:"score"`
}

type pluginSet struct {
	Enabled  []pluginRef `json:"enabled"`
	Disabled []pluginRef `json:"disabled"`
}

type pluginRef struct {
	Name   string `json:"name"`
	Weight *int32 `json:"weight"`
}

type extenderConfig struct {
	FilterVerb       string            `json:"filterVerb"`
	PrioritizeVerb   string            `json:"prioritizeVerb"`
	Weight           int64             `json:"weight"`
	ManagedResources []managedResource `json:"managedResources"`
}

type managedResource struct {
	Name string `json:"name"`
}

// fitArgs and balancedArgs are the plugins' args.
type fitArgs struct {
	ScoringStrategy *struct {
		Type      string `json:"type"`
		Resources []struct {
			Name   string `json:"name"`
			Weight int64  `json:"weight"`
		} `json:"resources"`
		RequestedToCapacityRatio *struct {
			Shape []struct {
				Utilization int64 `json:"utilization"`
				Score       int64 `json:"score"`
			} `json:"shape"`
		} `json:"requestedToCapacityRatio"`
	} `json:"scoringStrategy"`
}

type balancedArgs struct {
	Resources []struct {
		Name string `json:"name"`
	} `json:"resources"`
}

// ReadSchedulerConfig reads a KubeSchedulerConfiguration file; see
// ParseSchedulerConfig.
func ReadSchedulerConfig(file string) (*Scheduler, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	s, err := ParseSchedulerConfig(data)
	if err != nil {
		return nil, &trace.InputError{File: file, Err: err}
	}
	return s, nil
}

// ParseSchedulerConfig returns what a replay follows of a
// KubeSchedulerConfiguration (v1, YAML or JSON) for the default-scheduler
// profile. It applies kube-scheduler v1.34's defaults as it does:
//   - the default plugins and their MultiPoint weights are merged with the
//     profile's (mergePluginSet);
//   - a score plugin's weight is taken from plugins.score before
//     plugins.multiPoint, 1 when 0;
//   - NodeResourcesFit's and NodeResourcesBalancedAllocation's args are
//     defaulted: CPU and memory, weight 1.
//
// Every extender is taken for the gpushare extender, with its filter and
// prioritize verbs. Exactly one that gets the pods asking
// aliyun.com/gpu-mem must filter: managedResources naming it, or none (it
// gets every pod). None that gets every pod may filter. The prioritize
// weights of the extenders that get each kind of pod add up.
func ParseSchedulerConfig(data []byte) (*Scheduler, error) {
	return ParseSchedulerConfigProfile(data, defaultSchedulerID)
}

// ParseSchedulerConfigProfile is ParseSchedulerConfig for the profile
// whose schedulerName is profile. The chart's second scheduler names its
// own.
func ParseSchedulerConfigProfile(data []byte, profile string) (*Scheduler, error) {
	var cfg schedulerConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parsing a KubeSchedulerConfiguration: %w", err)
	}
	if cfg.Kind != "" && cfg.Kind != "KubeSchedulerConfiguration" {
		return nil, fmt.Errorf("kind is %s; want KubeSchedulerConfiguration", cfg.Kind)
	}
	s := &Scheduler{}
	if cfg.PercentageOfNodesToScore != nil {
		s.PercentageOfNodesToScore = *cfg.PercentageOfNodesToScore
	}
	var prof profileConfig
	switch {
	case len(cfg.Profiles) == 0:
	case len(cfg.Profiles) == 1 && cfg.Profiles[0].SchedulerName == nil && profile == defaultSchedulerID:
		prof = cfg.Profiles[0]
	default:
		found := false
		for _, p := range cfg.Profiles {
			if p.SchedulerName != nil && *p.SchedulerName == profile {
				prof, found = p, true
			}
		}
		if !found {
			return nil, fmt.Errorf("no profile has schedulerName %s", profile)
		}
	}
	if prof.PercentageOfNodesToScore != nil {
		s.PercentageOfNodesToScore = *prof.PercentageOfNodesToScore
	}
	if p := s.PercentageOfNodesToScore; p < 0 || p > 100 {
		return nil, fmt.Errorf("percentageOfNodesToScore %d: want 0 to 100", p)
	}
	s.FitWeight, s.BalancedWeight, s.TaintWeight = scoreWeights(prof.Plugins)
	s.Fit = ScoringStrategy{Type: LeastAllocated, Resources: defaultResources}
	s.BalancedResources = []string{resourceCPU, resourceMemory}
	for _, pc := range prof.PluginConfig {
		raw, err := yaml.Marshal(pc.Args)
		if err != nil {
			return nil, err
		}
		switch pc.Name {
		case pluginFit:
			var a fitArgs
			if err := yaml.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("%s args: %w", pc.Name, err)
			}
			if s.Fit, err = a.strategy(); err != nil {
				return nil, fmt.Errorf("%s args: %w", pc.Name, err)
			}
		case pluginBalanced:
			var a balancedArgs
			if err := yaml.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("%s args: %w", pc.Name, err)
			}
			if len(a.Resources) > 0 {
				s.BalancedResources = nil
				for _, r := range a.Resources {
					s.BalancedResources = append(s.BalancedResources, r.Name)
				}
			}
		}
	}
	filters := 0
	for i := range cfg.Extenders {
		e := &cfg.Extenders[i]
		all := len(e.ManagedResources) == 0
		gpu := all || slices.ContainsFunc(e.ManagedResources, func(r managedResource) bool { return r.Name == string(gpushare.ResourceGPUMem) })
		if e.FilterVerb != "" {
			switch {
			case all:
				return nil, fmt.Errorf("extender %d filters every pod: a replay follows the gpushare filter for pods that ask %s only", i, gpushare.ResourceGPUMem)
			case gpu:
				filters++
			}
		}
		if e.PrioritizeVerb == "" {
			continue
		}
		if gpu {
			s.GPUPrioritizeWeight += e.Weight
		}
		if all {
			s.CPUPrioritizeWeight += e.Weight
		}
	}
	if filters != 1 {
		return nil, fmt.Errorf("%d extenders filter pods that ask %s; a replay follows one, the gpushare extender's filter", filters, gpushare.ResourceGPUMem)
	}
	return s, nil
}

// scoreWeights returns NodeResourcesFit's,
// NodeResourcesBalancedAllocation's and TaintToleration's score weights in
// a profile with plugins p (nil: the default plugins), 0 for a plugin that
// does not score. The default plugins are enabled at MultiPoint, these
// three with weights 1, 1 and 3. The profile's MultiPoint set is merged
// into them: a disabled name, or "*", removes defaults, and an enabled one
// replaces the default of its name or is added. A plugin then scores if
// plugins.score enables it. It also scores if MultiPoint does and
// plugins.score disables neither it nor "*". Its weight is the first of
// plugins.score's and MultiPoint's, 1 when 0.
func scoreWeights(p *pluginsConfig) (fit, balanced, taint int64) {
	multi := []pluginRef{{Name: pluginFit, Weight: ptrInt32(defaultFitWeight)}, {Name: pluginBalanced, Weight: ptrInt32(defaultBalancedWeight)},
		{Name: pluginTaint, Weight: ptrInt32(defaultTaintWeight)}}
	var score pluginSet
	if p != nil {
		disabled := names(p.MultiPoint.Disabled)
		var merged []pluginRef
		if !slices.Contains(disabled, "*") {
			for _, d := range multi {
				if slices.Contains(disabled, d.Name) {
					continue
				}
				if i := slices.IndexFunc(p.MultiPoint.Enabled, func(e pluginRef) bool { return e.Name == d.Name }); i >= 0 {
					d = p.MultiPoint.Enabled[i]
				}
				merged = append(merged, d)
			}
		}
		for _, e := range p.MultiPoint.Enabled {
			if !slices.ContainsFunc(merged, func(m pluginRef) bool { return m.Name == e.Name }) {
				merged = append(merged, e)
			}
		}
		multi, score = merged, p.Score
	}
	weight := func(name string) int64 {
		var w *int32
		found := false
		if i := slices.IndexFunc(score.Enabled, func(e pluginRef) bool { return e.Name == name }); i >= 0 {
			w, found = score.Enabled[i].Weight, true
		} else if i := slices.IndexFunc(multi, func(e pluginRef) bool { return e.Name == name }); i >= 0 {
			disabled := names(score.Disabled)
			if slices.Contains(disabled, "*") || slices.Contains(disabled, name) {
				return 0
			}
			w, found = multi[i].Weight, true
		}
		if !found {
			return 0
		}
		if w == nil || *w == 0 {
			return 1
		}
		return int64(*w)
	}
	return weight(pluginFit), weight(pluginBalanced), weight(pluginTaint)
}

func names(ps []pluginRef) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func ptrInt32(v int32) *int32 { return &v }

// strategy is the scoring strategy of a's args, with kube-scheduler's
// defaults: LeastAllocated over CPU and memory when unset, CPU and memory
// when no resources are listed, weight 1 when 0.
func (a *fitArgs) strategy() (ScoringStrategy, error) {
	st := ScoringStrategy{Type: LeastAllocated}
	if a.ScoringStrategy != nil {
		if a.ScoringStrategy.Type != "" {
			st.Type = a.ScoringStrategy.Type
		}
		for _, r := range a.ScoringStrategy.Resources {
			st.Resources = append(st.Resources, ResourceWeight{Name: r.Name, Weight: max(r.Weight, 1)})
		}
		if rtcr := a.ScoringStrategy.RequestedToCapacityRatio; rtcr != nil {
			for _, p := range rtcr.Shape {
				st.Shape = append(st.Shape, ShapePoint{Utilization: p.Utilization, Score: p.Score})
			}
		}
	}
	if len(st.Resources) == 0 {
		st.Resources = defaultResources
	}
	switch st.Type {
	case LeastAllocated, MostAllocated:
	case RequestedToCapacityRatio:
		if len(st.Shape) == 0 {
			return st, errors.New("RequestedToCapacityRatio needs a shape")
		}
		for i, p := range st.Shape {
			if p.Utilization < 0 || p.Utilization > 100 || p.Score < 0 || p.Score > maxShapeScore {
				return st, fmt.Errorf("shape point %d (%d, %d): want utilization 0..100 and score 0..10", i, p.Utilization, p.Score)
			}
			if i > 0 && p.Utilization <= st.Shape[i-1].Utilization {
				return st, errors.New("shape utilizations must ascend")
			}
		}
	default:
		return st, fmt.Errorf("scoring strategy %q: want %s, %s or %s", st.Type, LeastAllocated, MostAllocated, RequestedToCapacityRatio)
	}
	return st, nil
}

// kubeUsage is what kube-scheduler's node snapshot holds of a node for
// scoring. That is its allocatable CPU (millicores), memory (MiB) and
// aliyun.com/gpu-mem (units), and what its pods request. The requests are
// kept as requested (Requested), and with kube-scheduler's defaults for
// containers that request no CPU or memory (NonZeroRequested: 100
// millicores, 200 MiB).
type kubeUsage struct {
	allocCPU, allocMem, allocGPU int64
	reqCPU, reqMem, reqGPU       int64
	nzCPU, nzMem                 int64
}

// podUsage is what a pod adds to a node's usage.
type podUsage struct {
	cpu, mem, gpu int64
	nzCPU, nzMem  int64
}

func (u *kubeUsage) add(p *podUsage) {
	u.reqCPU += p.cpu
	u.reqMem += p.mem
	u.reqGPU += p.gpu
	u.nzCPU += p.nzCPU
	u.nzMem += p.nzMem
}

// Score is kube-scheduler's own score of a node with kubeUsage u for a pod
// asking p. It is NodeResourcesFit's and NodeResourcesBalancedAllocation's
// scores times their weights. Each is 0..100, in integer arithmetic as
// kube-scheduler's.
func (s *Scheduler) score(u *kubeUsage, p *podUsage) int64 {
	var total int64
	if s.FitWeight > 0 {
		total += s.FitWeight * s.fitScore(u, p)
	}
	if s.BalancedWeight > 0 {
		total += s.BalancedWeight * balancedScore(s.BalancedResources, u, p, s.BalanceGain)
	}
	return total
}

// allocReq returns the allocatable amount of resource on the node, and
// what is requested there once the pod is. nonZero applies
// kube-scheduler's defaults for CPU and memory. It returns (0, 0) for a
// resource the replay does not know, or an extended resource the pod does
// not ask. kube-scheduler then leaves it out
// (resourceAllocationScorer.calculateResourceAllocatableRequest).
func allocReq(resource string, u *kubeUsage, p *podUsage, nonZero bool) (alloc, req int64) {
	switch resource {
	case resourceCPU:
		if nonZero {
			return u.allocCPU, u.nzCPU + p.nzCPU
		}
		return u.allocCPU, u.reqCPU + p.cpu
	case resourceMemory:
		if nonZero {
			return u.allocMem, u.nzMem + p.nzMem
		}
		return u.allocMem, u.reqMem + p.mem
	case string(gpushare.ResourceGPUMem):
		if p.gpu == 0 {
			return 0, 0
		}
		return u.allocGPU, u.reqGPU + p.gpu
	}
	return 0, 0
}

// fitScore is NodeResourcesFit's score (leastResourceScorer,
// mostResourceScorer, requestedToCapacityRatioScorer).
func (s *Scheduler) fitScore(u *kubeUsage, p *podUsage) int64 {
	var sum, weights int64
	for _, r := range s.Fit.Resources {
		alloc, req := allocReq(r.Name, u, p, true)
		if alloc == 0 {
			continue
		}
		var rs int64
		switch s.Fit.Type {
		case LeastAllocated:
			if req <= alloc {
				rs = (alloc - req) * maxNodeScore / alloc
			}
		case MostAllocated:
			rs = min(req, alloc) * maxNodeScore / alloc
		case RequestedToCapacityRatio:
			util := int64(100)
			if req <= alloc {
				util = req * 100 / alloc
			}
			rs = s.shape(util)
			if rs <= 0 {
				// kube-scheduler counts neither the score nor the weight.
				continue
			}
		}
		sum += rs * r.Weight
		weights += r.Weight
	}
	if weights == 0 {
		return 0
	}
	if s.Fit.Type == RequestedToCapacityRatio {
		return int64(math.Round(float64(sum) / float64(weights)))
	}
	return sum / weights
}

// shape is RequestedToCapacityRatio's broken linear function at
// utilization util, scaled to 0..100 (helper.BuildBrokenLinearFunction).
func (s *Scheduler) shape(util int64) int64 {
	pts := s.Fit.Shape
	scale := int64(maxNodeScore / maxShapeScore)
	for i, p := range pts {
		if util <= p.Utilization {
			if i == 0 {
				return p.Score * scale
			}
			q := pts[i-1]
			return q.Score*scale + (p.Score*scale-q.Score*scale)*(util-q.Utilization)/(p.Utilization-q.Utilization)
		}
	}
	return pts[len(pts)-1].Score * scale
}

// balancedScore is NodeResourcesBalancedAllocation's score, 0 when the pod
// asks none of the resources. In 1.34 it is balanceOf the node with the
// pod. With gain (kube-scheduler 1.36 and later) it is 50 + (50 + after -
// before)/2 in integer arithmetic, after and before being the node's
// balance with and without the pod.
//
// Example: nodes of 32 cores and 128 GiB, a pod of 4 cores and 32 GiB. On
// a node with 8 cores and 32 GiB requested (25%, 25%), the balance goes
// 100 -> 93: score 93, with gain 71. On one with 16 cores and none (50%,
// 0%), it goes 75 -> 81: score 81, with gain 78. So 1.34 prefers the first
// node, and 1.36 the second.
func balancedScore(resources []string, u *kubeUsage, p *podUsage, gain bool) int64 {
	asks := false
	for _, r := range resources {
		asks = asks || podRequest(r, p) != 0
	}
	if !asks {
		return 0
	}
	after := balanceOf(resources, u, p, true)
	if !gain {
		return after
	}
	before := balanceOf(resources, u, p, false)
	return maxNodeScore/2 + (maxNodeScore/2+after-before)/2
}

// balanceOf is kube-scheduler's balancedResourceScore of the node: 100
// times one less the standard deviation of its requested shares of the
// resources. It counts the pod's requests when with is set. The resources
// skipped are those allocReq skips, with the pod or without.
func balanceOf(resources []string, u *kubeUsage, p *podUsage, with bool) int64 {
	var buf [4]float64
	fractions := buf[:0]
	var total float64
	for _, r := range resources {
		alloc, req := allocReq(r, u, p, false)
		if alloc == 0 {
			continue
		}
		if !with {
			req -= podRequest(r, p)
		}
		f := min(float64(req)/float64(alloc), 1)
		total += f
		fractions = append(fractions, f)
	}
	var std float64
	switch {
	case len(fractions) == 2:
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	case len(fractions) > 2:
		mean := total / float64(len(fractions))
		var sum float64
		for _, f := range fractions {
			sum += (f - mean) * (f - mean)
		}
		std = math.Sqrt(sum / float64(len(fractions)))
	}
	return int64((1 - std) * maxNodeScore)
}

// podRequest is what the pod asks of resource, as allocReq counts it.
func podRequest(resource string, p *podUsage) int64 {
	switch resource {
	case resourceCPU:
		return p.cpu
	case resourceMemory:
		return p.mem
	case string(gpushare.ResourceGPUMem):
		return p.gpu
	}
	return 0
}
