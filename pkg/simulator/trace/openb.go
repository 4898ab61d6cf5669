package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// OpenbMilli is the units of one card in the openb traces: a sharing task
// asks gpu_milli of them.
const OpenbMilli = 1000

// maxOpenbCards bounds the gpu column, so a typo cannot allocate millions of cards.
const maxOpenbCards = 64

// InputError locates a problem in an input file: Line and Column are
// 1-based (Column counts bytes); Line 0 means the whole file.
type InputError struct {
	File         string
	Line, Column int
	Err          error
}

func (e *InputError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d:%d: %v", e.File, e.Line, e.Column, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// csvTable reads a CSV file with a header row and finds columns by name.
type csvTable struct {
	file string
	r    *csv.Reader
	// col: column name -> field position.
	col map[string]int
	rec []string
}

func newCSVTable(r io.Reader, file string, required, optional []string) (*csvTable, error) {
	t := &csvTable{file: file, r: csv.NewReader(r), col: map[string]int{}}
	t.r.FieldsPerRecord = -1
	t.r.TrimLeadingSpace = true
	header, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return nil, &InputError{File: file, Err: fmt.Errorf("empty file; want a header row %q", strings.Join(required, ","))}
	}
	if err != nil {
		return nil, t.csvErr(err)
	}
	for i, h := range header {
		t.col[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, name := range required {
		if _, ok := t.col[name]; !ok {
			want := strings.Join(required, ",")
			if len(optional) > 0 {
				want += " (optional: " + strings.Join(optional, ",") + ")"
			}
			return nil, &InputError{File: file, Line: 1, Column: 1, Err: fmt.Errorf("header has no column %q; want at least %s", name, want)}
		}
	}
	return t, nil
}

func (t *csvTable) csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &InputError{File: t.file, Line: pe.Line, Column: pe.Column, Err: pe.Err}
	}
	return &InputError{File: t.file, Err: err}
}

// next reads the next row; io.EOF at the end.
func (t *csvTable) next() error {
	rec, err := t.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return err
		}
		return t.csvErr(err)
	}
	t.rec = rec
	return nil
}

// errorf is an error at column name of the current row (its start when the
// row lacks that column).
func (t *csvTable) errorf(name, format string, args ...any) error {
	i, ok := t.col[name]
	line, col := t.r.FieldPos(0)
	if ok && i < len(t.rec) {
		line, col = t.r.FieldPos(i)
	}
	return &InputError{File: t.file, Line: line, Column: col, Err: fmt.Errorf(format, args...)}
}

// str returns column name of the current row, "" when absent.
func (t *csvTable) str(name string) string {
	i, ok := t.col[name]
	if !ok || i >= len(t.rec) {
		return ""
	}
	return strings.TrimSpace(t.rec[i])
}

// int returns column name as a whole number in [0, hi].
func (t *csvTable) int(name string, hi int64) (int64, error) {
	s := t.str(name)
	if s == "" {
		return 0, t.errorf(name, "%s is empty; want a whole number", name)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Some exports write whole numbers as "12000.0".
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != float64(int64(f)) {
			return 0, t.errorf(name, "%s is %q; want a whole number", name, s)
		}
		v = int64(f)
	}
	if v < 0 || v > hi {
		return 0, t.errorf(name, "%s is %d; want 0 to %d", name, v, hi)
	}
	return v, nil
}

// ReadOpenbNodes reads an openb node list (columns sn, cpu_milli,
// memory_mib, gpu, model; others ignored): each node gets gpu cards of
// OpenbMilli units of the model. file names the input in errors.
func ReadOpenbNodes(r io.Reader, file string) ([]Node, error) {
	t, err := newCSVTable(r, file, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, nil)
	if err != nil {
		return nil, err
	}
	var nodes []Node
	seen := map[string]int{} // name -> line
	for {
		if err := t.next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		name := t.str("sn")
		if name == "" {
			return nil, t.errorf("sn", "sn (the node name) is empty")
		}
		line, _ := t.r.FieldPos(0)
		if prev, dup := seen[name]; dup {
			return nil, t.errorf("sn", "node %s appears twice (first on line %d)", name, prev)
		}
		seen[name] = line
		n := Node{Name: name, Model: t.str("model"), Unit: "milli"}
		if n.MilliCPU, err = t.int("cpu_milli", 1<<40); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.int("memory_mib", 1<<40); err != nil {
			return nil, err
		}
		gpus, err := t.int("gpu", maxOpenbCards)
		if err != nil {
			return nil, err
		}
		info := &allocator.CardInfo{Model: n.Model} // the node's cards are alike
		for i := range int(gpus) {
			n.Cards = append(n.Cards, allocator.Card{Index: i, Info: info, Total: OpenbMilli, Healthy: true})
		}
		n.Labels = NodeLabels(n.Model, len(n.Cards))
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, &InputError{File: file, Err: errors.New("no nodes after the header")}
	}
	return nodes, nil
}

// ReadOpenbPods reads an openb pod list (columns name, cpu_milli,
// memory_mib, num_gpu, gpu_milli, optional gpu_spec; others ignored):
//
//   - num_gpu 0: a CPU-only pod (gpu_milli must be 0);
//   - num_gpu 1: gpu_milli units (1 to 1000) on one card;
//   - num_gpu k > 1: k whole cards (gpu_milli must be 1000).
//
// gpu_spec lists the card models the pod accepts, separated by "|": each an
// exact model name of the node list's model column, as if the pod carried
// them in gpushare.io/gpu-models (a name with a '*' or '?', which the
// annotation reads as a pattern, is an error).
func ReadOpenbPods(r io.Reader, file string) ([]Pod, error) {
	t, err := newCSVTable(r, file, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, []string{"gpu_spec"})
	if err != nil {
		return nil, err
	}
	var pods []Pod
	seen := map[string]int{} // name -> line
	for {
		if err := t.next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		p := Pod{Name: t.str("name")}
		if p.Name == "" {
			return nil, t.errorf("name", "name is empty")
		}
		line, _ := t.r.FieldPos(0)
		if prev, dup := seen[p.Name]; dup {
			return nil, t.errorf("name", "pod %s appears twice (first on line %d)", p.Name, prev)
		}
		seen[p.Name] = line
		if p.MilliCPU, err = t.int("cpu_milli", 1<<40); err != nil {
			return nil, err
		}
		if p.MemoryMiB, err = t.int("memory_mib", 1<<40); err != nil {
			return nil, err
		}
		gpus, err := t.int("num_gpu", maxOpenbCards)
		if err != nil {
			return nil, err
		}
		milli, err := t.int("gpu_milli", OpenbMilli)
		if err != nil {
			return nil, err
		}
		switch {
		case gpus == 0 && milli != 0:
			return nil, t.errorf("gpu_milli", "gpu_milli is %d with num_gpu 0; a CPU-only task asks gpu_milli 0", milli)
		case gpus == 0:
			p.Kind = KindCPU
		case gpus == 1 && milli == 0:
			return nil, t.errorf("gpu_milli", "gpu_milli is 0 with num_gpu 1; want 1 to %d", OpenbMilli)
		case gpus == 1:
			p.Demand = gpushare.Demand{{Name: "main", Units: milli, Cards: 1}}
			p.Kind = KindShare
			if milli == OpenbMilli {
				p.Kind = KindWhole
			}
		case milli != OpenbMilli:
			return nil, t.errorf("gpu_milli", "gpu_milli is %d with num_gpu %d; a multi-GPU task asks whole cards (gpu_milli %d)", milli, gpus, OpenbMilli)
		default:
			p.Demand = gpushare.Demand{{Name: "main", Units: OpenbMilli, Cards: int(gpus)}}
			p.Kind = KindMulti
		}
		if spec := t.str("gpu_spec"); spec != "" {
			for _, m := range strings.Split(spec, "|") {
				if m = strings.TrimSpace(m); m != "" {
					if strings.ContainsAny(m, "*?") {
						return nil, t.errorf("gpu_spec", "gpu_spec model %q has a pattern character; gpu_spec names models exactly", m)
					}
					p.Models = append(p.Models, m)
				}
			}
			if len(p.Models) > 0 {
				p.Constraints = &gpushare.CardConstraints{Models: p.Models}
			}
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		return nil, &InputError{File: file, Err: errors.New("no pods after the header")}
	}
	return pods, nil
}
