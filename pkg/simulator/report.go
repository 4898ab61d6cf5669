package simulator

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// Summary is one policy's results, averaged over seeds.
type Summary struct {
	Policy string
	Seeds  []uint64
	// Pods is the mean number of pods per seed, clones included; CPUOnly
	// the mean number of CPU-only pods among them, and Skipped of those
	// left out; CPUPods how they were handled.
	Pods, CPUOnly, Skipped float64
	CPUPods                CPUPods
	// Topology is the topology replayed.
	Topology Topology
	// AllocAt: mark (percent of capacity arrived) -> mean allocated share
	// of GPU capacity, percent; NaN where arrival never reached the mark.
	AllocAt map[int]float64
	// Curve[x]: mean allocated share at x% arrival, for x from 0 to the
	// last percent every seed reached.
	Curve []float64
	// FailedPods is the mean number of failed pods per seed; FailedByKind
	// splits it.
	FailedPods   float64
	FailedByKind map[trace.Kind]float64
	// FragAt: mark -> mean fragmentation, percent of capacity.
	FragAt map[int]float64
	// Percentage, Nodes and NodesToFind: kube-scheduler's sampling
	// replayed (see Result); Retried and ExtraCycles are means per seed.
	Percentage           int32
	Nodes, NodesToFind   int
	Retried, ExtraCycles float64
	// Seconds is the mean wall time of one replay.
	Seconds float64
}

// Summarize averages results of one policy over seeds.
func Summarize(policy string, results []*Result) Summary {
	s := Summary{Policy: policy, AllocAt: map[int]float64{}, FailedByKind: map[trace.Kind]float64{}, FragAt: map[int]float64{}}
	if len(results) == 0 {
		return s
	}
	n := float64(len(results))
	curveLen := math.MaxInt
	s.Percentage, s.Nodes, s.NodesToFind = results[0].Percentage, results[0].Nodes, results[0].NodesToFind
	s.CPUPods, s.Topology = results[0].CPUPods, results[0].Topology
	for _, r := range results {
		s.Retried += float64(r.Retried) / n
		s.ExtraCycles += float64(r.ExtraCycles) / n
		s.Seeds = append(s.Seeds, r.Seed)
		s.Pods += float64(r.Pods) / n
		s.Skipped += float64(r.Skipped) / n
		s.CPUOnly += float64(r.CPUOnly) / n
		s.FailedPods += float64(r.FailedTotal()) / n
		s.Seconds += r.Seconds / n
		for _, k := range trace.Kinds {
			s.FailedByKind[k] += float64(r.Failed[k]) / n
		}
		curveLen = min(curveLen, len(r.AllocCount))
	}
	for _, m := range Marks {
		for _, r := range results {
			s.AllocAt[m] += r.AllocAt(m) / n
			if f, ok := r.FragAt[m]; ok {
				s.FragAt[m] += f / n
			} else {
				s.FragAt[m] = math.NaN()
			}
		}
	}
	s.Curve = make([]float64, curveLen)
	for x := range s.Curve {
		for _, r := range results {
			s.Curve[x] += r.AllocAt(x) / n
		}
	}
	return s
}

// Format is an output format of Write.
type Format string

// Formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
	FormatCSV   Format = "csv"
)

// Write writes summaries to w in format.
func Write(w io.Writer, format Format, sums []Summary) error {
	switch format {
	case FormatTable:
		return writeTable(w, sums)
	case FormatJSON:
		return writeJSON(w, sums)
	case FormatCSV:
		return writeCSV(w, sums)
	}
	return fmt.Errorf("unknown format %q; want table, json or csv", format)
}

// Pct formats a percentage with 2 decimals, "-" for NaN.
func Pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// num formats a mean count with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// seedList writes seeds compactly: "42-51", "7", "1,3,5".
func seedList(seeds []uint64) string {
	if len(seeds) == 0 {
		return ""
	}
	contiguous := true
	for i := 1; i < len(seeds); i++ {
		if seeds[i] != seeds[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(seeds) > 2 {
		return fmt.Sprintf("%d-%d", seeds[0], seeds[len(seeds)-1])
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return strings.Join(parts, ",")
}

func writeTable(w io.Writer, sums []Summary) error {
	var buf bytes.Buffer
	if len(sums) > 0 {
		fmt.Fprintf(&buf, "Allocated GPU memory, %% of capacity, when the arrived demand is 90..130%% of capacity\n(mean of seeds %s; %s pods per seed, clones included", seedList(sums[0].Seeds), num(sums[0].Pods))
		switch {
		case sums[0].Skipped > 0:
			fmt.Fprintf(&buf, ", of which %s CPU-only pods not replayed", num(sums[0].Skipped))
		case sums[0].CPUOnly > 0:
			who := "kube-scheduler"
			if sums[0].Topology == TopologySecondScheduler {
				who = "the cluster's own kube-scheduler (its defaults)"
			}
			fmt.Fprintf(&buf, ",\nof which %s CPU-only pods placed as %s would", num(sums[0].CPUOnly), who)
		}
		fmt.Fprint(&buf, ")")
		if sampled(sums) {
			fmt.Fprintf(&buf, ";\nkube-scheduler's percentageOfNodesToScore %s: each cycle ends at the first %d of the %d nodes\nthat pass its own filters, and the policy chooses among those",
				percentage(sums[0].Percentage), sums[0].NodesToFind, sums[0].Nodes)
		}
		fmt.Fprint(&buf, ":\n\n")
	}
	width := len("policy")
	for _, s := range sums {
		width = max(width, len(s.Policy))
	}
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t", width, "policy")
	for _, m := range Marks {
		fmt.Fprintf(tw, "%d%%\t", m)
	}
	fmt.Fprint(tw, "failed pods\tseconds\t\n")
	for _, s := range sums {
		fmt.Fprintf(tw, "%-*s\t", width, s.Policy)
		for _, m := range Marks {
			fmt.Fprintf(tw, "%s\t", Pct(s.AllocAt[m]))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t\n", num(s.FailedPods), s.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(&buf, "\nFailed pods by kind, and fragmentation (GPU memory that FGD's typical tasks cannot use, % of capacity):\n\n")
	tw = tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t", width, "policy")
	for _, k := range trace.Kinds {
		fmt.Fprintf(tw, "%s\t", k)
	}
	fmt.Fprint(tw, "frag 100%\tfrag 130%\t")
	if sampled(sums) {
		fmt.Fprint(tw, "retried pods\textra cycles\t")
	}
	fmt.Fprint(tw, "\n")
	for _, s := range sums {
		fmt.Fprintf(tw, "%-*s\t", width, s.Policy)
		for _, k := range trace.Kinds {
			fmt.Fprintf(tw, "%s\t", num(s.FailedByKind[k]))
		}
		fmt.Fprintf(tw, "%s\t%s\t", Pct(s.FragAt[100]), Pct(s.FragAt[130]))
		if sampled(sums) {
			fmt.Fprintf(tw, "%s\t%s\t", num(s.Retried), num(s.ExtraCycles))
		}
		fmt.Fprint(tw, "\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sampled(sums) {
		fmt.Fprint(&buf, "\nRetried pods took more than one scheduling cycle: the policy found no card for them on a whole\nsample (kube-scheduler retries such a pod after a backoff of 1 s or more; the replay at once).\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// sampled tells whether kube-scheduler passes the policy fewer nodes than
// the cluster has.
func sampled(sums []Summary) bool {
	return len(sums) > 0 && sums[0].NodesToFind < sums[0].Nodes
}

// percentage names a percentageOfNodesToScore: "0 (adaptive)", "50".
func percentage(p int32) string {
	if p == 0 {
		return "0 (adaptive)"
	}
	return strconv.Itoa(int(p))
}

// jsonSummary is the --format json shape, one per policy:
//
//	{"policy":"fgd","seeds":[42,43],"cpu_pods":"place","topology":"extender","alloc_at":{"90":89.9,"100":95.2,...},"failed_pods":612,
//	 "retried_pods":0,"percentage_of_nodes_to_score":100,"nodes":1213,"nodes_to_find":1213,"seconds":11.8}
type jsonSummary struct {
	Policy      string   `json:"policy"`
	Seeds       []uint64 `json:"seeds"`
	CPUPods     CPUPods  `json:"cpu_pods"`
	Topology    Topology `json:"topology"`
	AllocAt     allocAt  `json:"alloc_at"`
	FailedPods  float64  `json:"failed_pods"`
	RetriedPods float64  `json:"retried_pods"`
	Percentage  int32    `json:"percentage_of_nodes_to_score"`
	Nodes       int      `json:"nodes"`
	NodesToFind int      `json:"nodes_to_find"`
	Seconds     float64  `json:"seconds"`
}

// allocAt marshals as an object keyed by mark in Marks order ("90" first),
// values rounded to 2 decimals, null for a mark never reached.
type allocAt map[int]float64

func (a allocAt) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range Marks {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", strconv.Itoa(m))
		v, ok := a[m]
		if !ok || math.IsNaN(v) {
			b.WriteString("null")
			continue
		}
		b.WriteString(strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSON(w io.Writer, sums []Summary) error {
	out := make([]jsonSummary, len(sums))
	for i, s := range sums {
		out[i] = jsonSummary{Policy: s.Policy, Seeds: s.Seeds, CPUPods: s.CPUPods, Topology: s.Topology, AllocAt: allocAt(s.AllocAt),
			FailedPods: math.Round(s.FailedPods*10) / 10, RetriedPods: math.Round(s.Retried*10) / 10,
			Percentage: s.Percentage, Nodes: s.Nodes, NodesToFind: s.NodesToFind, Seconds: math.Round(s.Seconds*10) / 10}
		if out[i].Seeds == nil {
			out[i].Seeds = []uint64{}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func writeCSV(w io.Writer, sums []Summary) error {
	cw := csv.NewWriter(w)
	header := []string{"policy", "seeds"}
	for _, m := range Marks {
		header = append(header, fmt.Sprintf("alloc_%d", m))
	}
	header = append(header, "failed_pods")
	for _, k := range trace.Kinds {
		header = append(header, "failed_"+strings.ReplaceAll(string(k), "-", "_"))
	}
	header = append(header, "frag_100", "frag_130", "pods", "seconds", "retried_pods", "extra_cycles", "percentage_of_nodes_to_score", "nodes", "nodes_to_find", "cpu_pods", "topology")
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, s := range sums {
		row := []string{s.Policy, seedList(s.Seeds)}
		for _, m := range Marks {
			row = append(row, Pct(s.AllocAt[m]))
		}
		row = append(row, num(s.FailedPods))
		for _, k := range trace.Kinds {
			row = append(row, num(s.FailedByKind[k]))
		}
		row = append(row, Pct(s.FragAt[100]), Pct(s.FragAt[130]), num(s.Pods), strconv.FormatFloat(s.Seconds, 'f', 1, 64),
			num(s.Retried), num(s.ExtraCycles), strconv.Itoa(int(s.Percentage)), strconv.Itoa(s.Nodes), strconv.Itoa(s.NodesToFind), string(s.CPUPods), string(s.Topology))
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
