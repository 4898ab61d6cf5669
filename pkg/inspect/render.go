package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Output formats (-o).
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Outputs lists the -o values.
var Outputs = []string{OutputWide, OutputJSON, OutputYAML}

// View says how to print a report.
type View struct {
	// Output is one of OutputTable, OutputWide, OutputJSON, OutputYAML.
	Output string
	// Details prints one block per node with each pod's units per card
	// (text outputs only; JSON and YAML always have them).
	Details bool
	// Bars draws a utilisation bar before each card's allocated/total; for
	// a terminal.
	Bars bool
}

// unattributedWhy explains pods whose card is unknown.
const unattributedWhy = "not scheduled through the extender: no " + gpushare.AnnotationIndex + " annotation and no usable " + gpushare.AnnotationAllocation

// ignoredWhat introduces a pod whose allocation annotation is ignored.
const ignoredWhat = "its " + gpushare.AnnotationAllocation + " annotation is ignored"

// write prints r to w as v says; v.Output is one Config.Validate accepts
// (the table for anything else).
func write(w io.Writer, r *Report, v View) error {
	switch v.Output {
	case OutputJSON:
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case OutputYAML:
		b, err := yaml.Marshal(r)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	var buf bytes.Buffer
	if v.Details {
		writeDetails(&buf, r, v)
	} else {
		writeSummary(&buf, r, v)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// barWidth is the number of cells in a utilisation bar.
const barWidth = 10

// bar draws used of total in barWidth cells, rounded to the nearest cell,
// except that a card with anything allocated shows at least one '#' and only
// a full card shows all ten: 8 of 16 is [#####-----], 1 of 80 is
// [#---------], 15 of 16 is [#########-].
func bar(used, total int64) string {
	filled := 0
	switch {
	case total <= 0 || used <= 0:
	case used >= total:
		filled = barWidth
	default:
		filled = int((used*2*barWidth + total) / (2 * total))
		filled = min(max(filled, 1), barWidth-1)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled) + "]"
}

// fraction formats allocated/total, with a bar first when v.Bars.
func fraction(used, total int64, v View) string {
	s := fmt.Sprintf("%d/%d", used, total)
	if v.Bars {
		s = bar(used, total) + " " + s
	}
	return s
}

// commonUnit returns the unit all nodes share, "" when they differ or there
// are none.
func commonUnit(r *Report) string {
	unit := ""
	for i, n := range r.Nodes {
		if i > 0 && n.Unit != unit {
			return ""
		}
		unit = n.Unit
	}
	return unit
}

// cardIndexes returns every card index of every node, sorted: the GPU<i>
// columns.
func cardIndexes(nodes []Node) []int {
	seen := map[int]bool{}
	var out []int
	for _, n := range nodes {
		for _, c := range n.Cards {
			if !seen[c.Index] {
				seen[c.Index] = true
				out = append(out, c.Index)
			}
		}
	}
	sort.Ints(out)
	return out
}

func (n *Node) card(index int) *Card {
	for i := range n.Cards {
		if n.Cards[i].Index == index {
			return &n.Cards[i]
		}
	}
	return nil
}

func address(n *Node) string {
	if n.Address == "" {
		return "<none>"
	}
	return n.Address
}

func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// table writes rows of tab-separated cells aligned, and returns the width of
// the widest line.
func table(w io.Writer, rows [][]string) int {
	var buf bytes.Buffer
	tw := newTabWriter(&buf)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	width := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		width = max(width, len([]rune(strings.TrimRight(line, " "))))
	}
	_, _ = w.Write(trimLines(buf.Bytes()))
	return width
}

// trimLines drops the padding tabwriter leaves after a last empty cell.
func trimLines(b []byte) []byte {
	lines := bytes.Split(b, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimRight(lines[i], " ")
	}
	return bytes.Join(lines, []byte("\n"))
}

// writeSummary prints one row per node, one GPU<i> column per card index:
//
//	NAME    IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  GPU Memory(GiB)
//	node-a  10.0.0.1   10/16                  4/80                   14/96
//
// then the cluster totals, notes on what the table cannot show, and pending pods.
func writeSummary(w io.Writer, r *Report, v View) {
	if len(r.Nodes) > 0 {
		unit := commonUnit(r)
		indexes := cardIndexes(r.Nodes)
		header := []string{"NAME", "IPADDRESS"}
		for _, i := range indexes {
			header = append(header, fmt.Sprintf("GPU%d(Allocated/Total)", i))
		}
		if unit != "" {
			header = append(header, "GPU Memory("+unit+")")
		} else {
			header = append(header, "GPU Memory")
		}
		if v.Output == OutputWide {
			header = append(header, "SOURCE")
		}
		rows := [][]string{header}
		for i := range r.Nodes {
			n := &r.Nodes[i]
			row := []string{n.Name, address(n)}
			for _, idx := range indexes {
				c := n.card(idx)
				if c == nil {
					row = append(row, "-")
					continue
				}
				cell := fraction(c.Allocated, c.Total, v)
				if v.Output == OutputWide && c.Model != "" {
					cell += " " + c.Model
				}
				if v.Output == OutputWide {
					cell += " [" + string(c.Mode()) + "]"
				}
				if !c.Healthy {
					cell += " (unhealthy)"
				}
				if c.Cordoned {
					cell += " (cordoned)"
				}
				row = append(row, cell)
			}
			mem := fmt.Sprintf("%d/%d", n.Allocated, n.Total)
			if unit == "" {
				mem += " " + n.Unit
			}
			row = append(row, mem)
			if v.Output == OutputWide {
				row = append(row, n.Source)
			}
			rows = append(rows, row)
		}
		width := table(w, rows)
		fmt.Fprintln(w, strings.Repeat("-", width))
		fmt.Fprintln(w, "Allocated/Total GPU Memory In Cluster:")
		for _, t := range r.Totals {
			fmt.Fprintf(w, "%d/%d %s (%d%%)\n", t.Allocated, t.Total, t.Unit, t.Percent)
		}
		if notes := summaryNotes(r); len(notes) > 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Notes:")
			for _, n := range notes {
				fmt.Fprintln(w, "  "+n)
			}
		}
	}
	writePending(w, r)
}

// summaryNotes explains what the summary's numbers leave out.
func summaryNotes(r *Report) []string {
	var notes []string
	for i := range r.Nodes {
		n := &r.Nodes[i]
		for _, c := range n.Cards {
			if !c.Healthy {
				notes = append(notes, fmt.Sprintf("%s: GPU%d is unhealthy: it receives no new pods", n.Name, c.Index))
			}
			if c.Cordoned && n.CordonError == "" {
				notes = append(notes, fmt.Sprintf("%s: GPU%d is %s: it receives no new pods", n.Name, c.Index, cordonedWhy))
			}
		}
		for _, note := range cordonNotes(n) {
			notes = append(notes, n.Name+": "+note)
		}
		if n.InventoryError != "" {
			notes = append(notes, n.InventoryError+"; cards "+sourceText(n.Source))
		} else if n.Source == "none" && len(n.Cards) == 0 {
			notes = append(notes, fmt.Sprintf("%s: reports no GPU memory (%s)", n.Name, gpushare.ResourceGPUMem))
		}
		for _, p := range n.Unattributed {
			notes = append(notes, fmt.Sprintf("%s: pod %s/%s holds %s on an unknown card, not counted above (%s)",
				n.Name, p.Namespace, p.Name, units(p.Units, n.Unit), unattributedWhy))
		}
		if n.MissingUnits > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s held on cards the node no longer reports, not counted above", n.Name, units(n.MissingUnits, n.Unit)))
		}
		for _, ig := range n.Ignored {
			notes = append(notes, fmt.Sprintf("%s: pod %s/%s: %s: %s", n.Name, ig.Namespace, ig.Name, ignoredWhat, ig.Reason))
		}
	}
	return notes
}

// isolationText describes a card's isolation mode in the details view.
func isolationText(m gpushare.Isolation) string {
	if m.Enforced() {
		return "isolation " + string(m)
	}
	return "isolation none (advisory)"
}

// cordonedWhy says who cordoned a card, and how.
const cordonedWhy = "cordoned by the operator (" + gpushare.AnnotationCordonedGPUs + ")"

// cordonNotes explains an invalid cordon annotation of n, or the UUIDs it
// names that n lacks.
func cordonNotes(n *Node) []string {
	var notes []string
	if n.CordonError != "" {
		notes = append(notes, n.CordonError)
	}
	if len(n.CordonedMissing) > 0 {
		notes = append(notes, fmt.Sprintf("%s names %s, which the node does not report", gpushare.AnnotationCordonedGPUs, strings.Join(n.CordonedMissing, ", ")))
	}
	return notes
}

func sourceText(source string) string {
	switch source {
	case "capacity":
		return "from the node's capacity (" + string(gpushare.ResourceGPUMem) + " divided evenly over " + string(gpushare.ResourceGPUCount) + ")"
	case "none":
		return "none: the node reports no " + string(gpushare.ResourceGPUMem)
	case sourceDRA:
		return "from the DRA driver's ResourceSlices (" + draview.DriverName + "); amounts are the allocated ResourceClaims"
	}
	return "from the device inventory"
}

func units(n int64, unit string) string {
	if unit == "" {
		return fmt.Sprintf("%d units", n)
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// writePending lists pods that ask gpu-mem and are on no node yet.
func writePending(w io.Writer, r *Report) {
	if len(r.Pending) == 0 {
		return
	}
	if len(r.Nodes) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Pending pods asking for GPU memory (they hold none yet):")
	unit := commonUnit(r)
	// The GPUS column (which cards a pod's annotations allow) only when a
	// pod chooses.
	choosing := slices.ContainsFunc(r.Pending, func(p PendingPod) bool { return p.Cards != "" })
	header := []string{"NAMESPACE", "NAME", "GPU MEMORY", "REASON"}
	if choosing {
		header = []string{"NAMESPACE", "NAME", "GPU MEMORY", "GPUS", "REASON"}
	}
	rows := [][]string{header}
	for _, p := range r.Pending {
		amount := "-"
		if p.Units > 0 {
			amount = units(p.Units, unit)
		}
		row := []string{p.Namespace, p.Name, amount}
		if choosing {
			cards := p.Cards
			switch {
			case p.Invalid:
				cards = "-"
			case cards == "":
				cards = "any"
			}
			row = append(row, cards)
		}
		rows = append(rows, append(row, p.Reason))
	}
	table(w, rows)
}

// podRow is one pod's units on each card of a node.
type podRow struct {
	namespace, name, state string
	// perCard: card index -> units.
	perCard map[int]int64
}

// podRows gathers each pod's shares across n's cards, sorted by namespace
// and name.
func podRows(n *Node) []podRow {
	byKey := map[string]*podRow{}
	var keys []string
	for _, c := range n.Cards {
		for _, p := range c.Pods {
			key := p.Namespace + "/" + p.Name
			row, ok := byKey[key]
			if !ok {
				row = &podRow{namespace: p.Namespace, name: p.Name, state: p.State, perCard: map[int]int64{}}
				byKey[key] = row
				keys = append(keys, key)
			}
			row.perCard[c.Index] += p.Units
		}
	}
	sort.Strings(keys)
	out := make([]podRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	return out
}

// writeDetails prints one block per node:
//
//	NAME:       node-a
//	IPADDRESS:  10.0.0.1
//	GPU0:       Tesla-T4, 16 GiB, GPU-a-0
//
//	NAME   NAMESPACE  GPU0(Allocated)  STATE
//	train  default    10               bound
//	Allocated/Total   10/16
//	Allocated/Total GPU Memory: 10/16 GiB (62%)
//
// then the cluster totals and pending pods.
func writeDetails(w io.Writer, r *Report, v View) {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		head := [][]string{{"NAME:", n.Name}, {"IPADDRESS:", address(n)}}
		if n.Source != "inventory" || n.InventoryError != "" {
			head = append(head, []string{"CARDS:", sourceText(n.Source)})
		}
		for _, c := range n.Cards {
			desc := []string{}
			if c.Model != "" {
				desc = append(desc, c.Model)
			}
			desc = append(desc, units(c.Total, n.Unit))
			if c.UUID != "" {
				desc = append(desc, c.UUID)
			}
			desc = append(desc, isolationText(c.Mode()))
			if !c.Healthy {
				desc = append(desc, "UNHEALTHY: receives no new pods")
			}
			if c.Cordoned {
				desc = append(desc, "CORDONED: receives no new pods")
			}
			head = append(head, []string{fmt.Sprintf("GPU%d:", c.Index), strings.Join(desc, ", ")})
		}
		if n.InventoryError != "" {
			head = append(head, []string{"WARNING:", n.InventoryError})
		}
		for _, note := range cordonNotes(n) {
			head = append(head, []string{"WARNING:", note})
		}
		table(w, head)
		fmt.Fprintln(w)

		header := []string{"NAME", "NAMESPACE"}
		for _, c := range n.Cards {
			header = append(header, fmt.Sprintf("GPU%d(Allocated)", c.Index))
		}
		header = append(header, "STATE")
		rows := [][]string{header}
		shown := map[int]int64{} // card index -> units of the rows above
		for _, p := range podRows(n) {
			row := []string{p.name, p.namespace}
			for _, c := range n.Cards {
				row = append(row, fmt.Sprint(p.perCard[c.Index]))
				shown[c.Index] += p.perCard[c.Index]
			}
			rows = append(rows, append(row, p.state))
		}
		if r.Namespace != "" {
			row := []string{"(other namespaces)", ""}
			other := false
			for _, c := range n.Cards {
				rest := c.Allocated - shown[c.Index]
				other = other || rest != 0
				row = append(row, fmt.Sprint(rest))
			}
			if other {
				rows = append(rows, append(row, ""))
			}
		}
		total := []string{"Allocated/Total", ""}
		for _, c := range n.Cards {
			total = append(total, fraction(c.Allocated, c.Total, v))
		}
		rows = append(rows, append(total, ""))
		table(w, rows)
		fmt.Fprintf(w, "Allocated/Total GPU Memory: %d/%d %s (%d%%)\n", n.Allocated, n.Total, n.Unit, percent(n.Allocated, n.Total))
		if len(n.Unattributed) > 0 {
			fmt.Fprintf(w, "On an unknown card, not counted above (%s):\n", unattributedWhy)
			for _, p := range n.Unattributed {
				fmt.Fprintf(w, "  %s/%s  %s\n", p.Namespace, p.Name, units(p.Units, n.Unit))
			}
		}
		if n.MissingUnits > 0 {
			fmt.Fprintf(w, "Held on cards the node no longer reports, not counted above: %s\n", units(n.MissingUnits, n.Unit))
		}
		if len(n.Ignored) > 0 {
			fmt.Fprintln(w, "Pods whose "+gpushare.AnnotationAllocation+" annotation is ignored:")
			for _, ig := range n.Ignored {
				fmt.Fprintf(w, "  %s/%s: %s\n", ig.Namespace, ig.Name, ig.Reason)
			}
		}
		fmt.Fprintln(w, strings.Repeat("-", 80))
	}
	if len(r.Nodes) > 0 {
		for _, t := range r.Totals {
			fmt.Fprintf(w, "Allocated/Total GPU Memory In Cluster:  %d/%d %s (%d%%)\n", t.Allocated, t.Total, t.Unit, t.Percent)
		}
	}
	writePending(w, r)
}
