package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// TraceOf is the trace of nodes and pods as ReadKubernetes reads them
// from a file: a test builds a cluster and its replay from the same
// objects. The pods keep their order; the objects are not changed.
func TraceOf(nodes []*corev1.Node, pods []*corev1.Pod) (*Trace, error) {
	conv, err := newKubeObjects()
	if err != nil {
		return nil, err
	}
	for i, n := range nodes {
		if err := conv.addNode(n, fmt.Sprintf("node %d", i+1)); err != nil {
			return nil, err
		}
	}
	for i, p := range pods {
		if err := conv.addPod(p, fmt.Sprintf("pod %d", i+1)); err != nil {
			return nil, err
		}
	}
	return &Trace{Nodes: conv.nodes, Pods: conv.pods}, nil
}

// kubeObjects turns Nodes and Pods into the replay's, one at a time, for
// ReadKubernetes and TraceOf: a name seen twice is an error, and pods that
// finished (Succeeded, Failed) are left out.
type kubeObjects struct {
	c                 *cache.Cache      // makes each node's cards as the extender sees them
	seenNode, seenPod map[string]string // node name, or namespace/name -> where it was first
	nodes             []Node
	pods              []Pod
}

func newKubeObjects() (*kubeObjects, error) {
	c, err := cache.New(cache.Config{})
	if err != nil {
		return nil, err
	}
	return &kubeObjects{c: c, seenNode: map[string]string{}, seenPod: map[string]string{}}, nil
}

// addNode adds node, found at where (e.g. "line 3").
func (o *kubeObjects) addNode(node *corev1.Node, where string) error {
	if prev, dup := o.seenNode[node.Name]; dup {
		return fmt.Errorf("node %s appears twice (first on %s)", node.Name, prev)
	}
	o.seenNode[node.Name] = where
	n, err := kubeNode(o.c, node)
	if err != nil {
		return err
	}
	o.nodes = append(o.nodes, n)
	return nil
}

// addPod adds pod, found at where, unless it finished.
func (o *kubeObjects) addPod(pod *corev1.Pod, where string) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	key := pod.Namespace + "/" + pod.Name
	if prev, dup := o.seenPod[key]; dup {
		return fmt.Errorf("pod %s appears twice (first on %s)", key, prev)
	}
	o.seenPod[key] = where
	p, err := kubePod(pod)
	if err != nil {
		return err
	}
	o.pods = append(o.pods, p)
	return nil
}

// ReadKubernetes reads Nodes and Pods from YAML or JSON, as `kubectl get
// nodes,pods -o yaml` writes them (a List) or as documents separated by
// "---"; other kinds are ignored. A node's cards are what the extender's
// cache makes of it (the gpushare.io/devices inventory, else
// aliyun.com/gpu-mem ÷ aliyun.com/gpu-count), its CPU and memory its
// allocatable. A pod's GPU demand is gpushare.PodDemand (in the nodes'
// unit), its CPU and memory its requests as NodeResourcesFit adds them.
// Pods that finished (Succeeded, Failed) are left out; where pods run now
// (spec.nodeName) is ignored: the replay starts from empty nodes.
func ReadKubernetes(r io.Reader, file string) (nodes []Node, pods []Pod, err error) {
	docs, err := yamlDocuments(r)
	if err != nil {
		return nil, nil, &InputError{File: file, Err: err}
	}
	conv, err := newKubeObjects()
	if err != nil {
		return nil, nil, err
	}
	for _, doc := range docs {
		j, err := yaml.YAMLToJSON(doc.text)
		if err != nil {
			line, msg := yamlErrorLine(err)
			return nil, nil, &InputError{File: file, Line: doc.line + max(line, 1) - 1, Column: 1, Err: errors.New(msg)}
		}
		var head struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if string(j) == "null" {
			continue
		}
		if err := json.Unmarshal(j, &head); err != nil {
			return nil, nil, &InputError{File: file, Line: doc.line, Column: 1, Err: errors.New("not a Kubernetes object: want a mapping with apiVersion and kind")}
		}
		items := []json.RawMessage{j}
		if head.Items != nil {
			items = head.Items
		}
		for i, item := range items {
			where := ""
			if head.Items != nil {
				where = fmt.Sprintf("item %d: ", i)
			}
			fail := func(err error) error {
				return &InputError{File: file, Line: doc.line, Column: 1, Err: fmt.Errorf("%s%w", where, err)}
			}
			var kind struct {
				Kind string `json:"kind"`
			}
			if err := json.Unmarshal(item, &kind); err != nil {
				return nil, nil, fail(err)
			}
			switch kind.Kind {
			case "Node":
				var node corev1.Node
				if err := json.Unmarshal(item, &node); err != nil {
					return nil, nil, fail(fmt.Errorf("decoding a Node: %w", err))
				}
				if err := conv.addNode(&node, fmt.Sprintf("line %d", doc.line)); err != nil {
					return nil, nil, fail(err)
				}
			case "Pod":
				var pod corev1.Pod
				if err := json.Unmarshal(item, &pod); err != nil {
					return nil, nil, fail(fmt.Errorf("decoding a Pod: %w", err))
				}
				if err := conv.addPod(&pod, fmt.Sprintf("line %d", doc.line)); err != nil {
					return nil, nil, fail(err)
				}
			}
		}
	}
	return conv.nodes, conv.pods, nil
}

// kubeNode turns node into a Node with the cards the extender's cache sees.
func kubeNode(c *cache.Cache, node *corev1.Node) (Node, error) {
	if node.Name == "" {
		return Node{}, errors.New("a Node has no metadata.name")
	}
	if err := c.SetNode(node); err != nil {
		return Node{}, err
	}
	views, ok := c.Inspect(node.Name)
	if !ok || len(views) != 1 {
		return Node{}, fmt.Errorf("node %s: not in the cache after SetNode", node.Name)
	}
	v := views[0]
	n := Node{Name: node.Name, Unit: v.Unit, Zone: ZoneKey(node.Labels), Labels: maps.Clone(node.Labels)}
	n.MilliCPU, n.MemoryMiB, _ = cache.NodeAllocatable(node)
	for _, card := range v.Cards {
		n.Cards = append(n.Cards, allocator.Card{Index: card.Index, Total: card.Total, Healthy: card.Healthy, Cordoned: card.Cordoned,
			Info: &allocator.CardInfo{UUID: card.UUID, Model: card.Model, Isolation: card.Isolation}})
		if n.Model == "" {
			n.Model = card.Model
		}
	}
	return n, nil
}

// ZoneKey returns the key kube-scheduler's node tree files a node under:
// its region and zone labels (the deprecated failure-domain.beta ones
// first), "" when it has neither (k8s.io/component-helpers
// node/topology.GetZoneKey).
func ZoneKey(labels map[string]string) string {
	zone, ok := labels[corev1.LabelFailureDomainBetaZone]
	if !ok {
		zone = labels[corev1.LabelTopologyZone]
	}
	region, ok := labels[corev1.LabelFailureDomainBetaRegion]
	if !ok {
		region = labels[corev1.LabelTopologyRegion]
	}
	if region == "" && zone == "" {
		return ""
	}
	return region + ":\x00:" + zone
}

// kubePod turns pod into a Pod.
func kubePod(pod *corev1.Pod) (Pod, error) {
	key := pod.Namespace + "/" + pod.Name
	if pod.Name == "" {
		return Pod{}, errors.New("a Pod has no metadata.name")
	}
	p := Pod{Name: key, Kind: KindCPU, NodeSelector: maps.Clone(pod.Spec.NodeSelector)}
	p.MilliCPU, p.MemoryMiB = cache.PodRequests(pod)
	if cpu, mem := nonZeroRequests(pod); cpu != p.MilliCPU || mem != p.MemoryMiB {
		p.NonZeroMilliCPU, p.NonZeroMemoryMiB = cpu, mem
	}
	d, err := gpushare.PodDemand(pod)
	switch {
	case errors.Is(err, gpushare.ErrNoGPUMem):
		return p, nil
	case err != nil:
		return Pod{}, fmt.Errorf("pod %s: %w", key, err)
	}
	p.Demand, p.Kind = d, KindShare
	if p.Constraints, err = gpushare.ParseCardConstraints(pod.Annotations); err != nil {
		return Pod{}, fmt.Errorf("pod %s: %w", key, err)
	}
	if p.Constraints != nil {
		p.Models = p.Constraints.Models
	}
	for _, c := range d {
		if c.Cards > 1 {
			p.Kind = KindMulti
		}
	}
	return p, nil
}

// kube-scheduler's requests for a container that names no CPU (memory)
// request, in NodeResourcesFit's scores (util.DefaultMilliCPURequest,
// DefaultMemoryRequest).
const (
	nonZeroMilliCPU  = 100
	nonZeroMemoryMiB = 200
)

// nonZeroRequests is PodRequests as kube-scheduler's NodeResourcesFit
// scores count it: each container (init containers too) that names no CPU
// (memory) request counts nonZeroMilliCPU (nonZeroMemoryMiB).
func nonZeroRequests(pod *corev1.Pod) (milliCPU, memMiB int64) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Overhead: pod.Spec.Overhead,
		Containers: slices.Clone(pod.Spec.Containers), InitContainers: slices.Clone(pod.Spec.InitContainers)}}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			req := maps.Clone(cs[i].Resources.Requests)
			if req == nil {
				req = corev1.ResourceList{}
			}
			if _, ok := req[corev1.ResourceCPU]; !ok {
				req[corev1.ResourceCPU] = *resource.NewMilliQuantity(nonZeroMilliCPU, resource.DecimalSI)
			}
			if _, ok := req[corev1.ResourceMemory]; !ok {
				req[corev1.ResourceMemory] = *resource.NewQuantity(nonZeroMemoryMiB<<20, resource.BinarySI)
			}
			cs[i].Resources.Requests = req
		}
	}
	return cache.PodRequests(p)
}

// yamlDoc is one YAML document and the line it starts on.
type yamlDoc struct {
	text []byte
	line int
}

// yamlDocuments splits r at lines that are "---".
func yamlDocuments(r io.Reader) ([]yamlDoc, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var docs []yamlDoc
	cur := yamlDoc{line: 1}
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if bytes.Equal(bytes.TrimRight(text, " \t\r"), []byte("---")) {
			docs = append(docs, cur)
			cur = yamlDoc{line: line + 1}
			continue
		}
		cur.text = append(append(cur.text, text...), '\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return append(docs, cur), nil
}

var yamlLineRE = regexp.MustCompile(`^(?:error converting YAML to JSON: )?yaml: line (\d+): (.*)$`)

// yamlErrorLine extracts the line number from a YAML error, 0 if none.
func yamlErrorLine(err error) (int, string) {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, err.Error()
	}
	n, _ := strconv.Atoi(m[1])
	return n, m[2]
}
