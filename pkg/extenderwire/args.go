package extenderwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// MaxBodyBytes caps a request body at what the largest request of a
// scheduler with nodeCacheCapable: true needs for 5,000 nodes. That is
// 5,000 node names of at most 253 characters (1.3 MB as JSON) and a pod of
// at most 1.5 MiB (etcd's limit): under 3 MiB. Whole Nodes
// (nodeCacheCapable: false) for thousands of nodes do not fit, so the
// shipped configuration sets nodeCacheCapable.
const MaxBodyBytes = 4 << 20

// bodyPool holds the buffers request bodies are read into: a filter with
// 5,000 node names is a 60 KiB body, read every scheduling cycle.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads r's body, at most MaxBodyBytes of it, into a buffer from
// bodyPool. The caller puts the buffer back once nothing refers to its
// bytes. A body that declares a length over the cap is refused before a
// byte of it is read, so a flood of oversized requests costs no reading.
func readBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, fmt.Errorf("request body is over %d bytes", MaxBodyBytes)
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		putBody(buf)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("request body is over %d bytes", tooBig.Limit)
		}
		return nil, fmt.Errorf("reading request: %w", err)
	}
	return buf, nil
}

// putBody returns a buffer of readBody to bodyPool. One grown past
// MaxBodyBytes is dropped: a request can make it that large only once.
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= MaxBodyBytes+bytes.MinRead {
		bodyPool.Put(buf)
	}
}

// Decode reads a JSON body of at most MaxBodyBytes into v. The body must
// be one JSON value, and anything after it but white space is refused. A
// body with two objects, or garbage after one, is not a request.
func Decode(w http.ResponseWriter, r *http.Request, v any) error {
	buf, err := readBody(w, r)
	if err != nil {
		return err
	}
	defer putBody(buf)
	return decodeBytes(buf.Bytes(), v)
}

// decodeBytes is Decode for a body already read.
func decodeBytes(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decoding request: data after the JSON value")
	}
	return nil
}

// DecodeArgs is Decode for the arguments of filter and prioritize, whose
// bulk is the list of node names: kube-scheduler sends every candidate's
// name, each cycle. See decodeArgsBytes.
func DecodeArgs(w http.ResponseWriter, r *http.Request, args *extenderv1.ExtenderArgs) error {
	buf, err := readBody(w, r)
	if err != nil {
		return err
	}
	defer putBody(buf)
	return decodeArgsBytes(buf.Bytes(), args)
}

// decodeArgsBytes decodes body into args as decodeBytes does, with the
// same result for every body, valid or not. A scanner of its own reads the
// common body: an object whose keys and node names are plain printable
// ASCII, each key once. The names become substrings of one string: two
// allocations for 5,000 names, where encoding/json makes one each after
// two passes of its scanner over them. encoding/json decodes the pod and
// the nodes. Any other body (escapes, other characters, a key twice,
// invalid JSON) is decoded by decodeBytes from the start, so its errors
// are encoding/json's.
func decodeArgsBytes(body []byte, args *extenderv1.ExtenderArgs) error {
	var fast extenderv1.ExtenderArgs
	if fastArgs(body, &fast) {
		*args = fast
		return nil
	}
	return decodeBytes(body, args)
}

// fastArgs decodes body into args if it is an object that argsScanner
// reads (see decodeArgsBytes). It reports false when the body needs
// encoding/json; args is then partly set.
func fastArgs(body []byte, args *extenderv1.ExtenderArgs) bool {
	p := argsScanner{b: body}
	p.space()
	if !p.eat('{') {
		return false
	}
	p.space()
	if !p.eat('}') {
		var seen [3]bool // pod, nodes, nodenames
		for {
			p.space()
			key, ok := p.plainString()
			if !ok {
				return false
			}
			p.space()
			if !p.eat(':') {
				return false
			}
			p.space()
			k := argsKey(key)
			if k >= 0 {
				if seen[k] {
					return false // encoding/json merges a key given twice
				}
				seen[k] = true
			}
			switch k {
			case 2:
				if args.NodeNames, ok = p.names(); !ok {
					return false
				}
			default:
				raw, ok := p.value()
				if !ok {
					return false
				}
				switch k {
				case 0:
					ok = json.Unmarshal(raw, &args.Pod) == nil
				case 1:
					ok = json.Unmarshal(raw, &args.Nodes) == nil
				}
				if !ok {
					return false
				}
			}
			p.space()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return false
		}
	}
	p.space()
	return p.i == len(p.b)
}

// argsKey returns the field of extenderv1.ExtenderArgs that key names: 0
// Pod, 1 Nodes, 2 NodeNames, -1 none. key is ASCII, matched without case
// as encoding/json matches it.
func argsKey(key []byte) int {
	for i, name := range []string{"pod", "nodes", "nodenames"} {
		if len(key) == len(name) && asciiEqualFold(key, name) {
			return i
		}
	}
	return -1
}

// asciiEqualFold reports whether the ASCII key equals the lower-case name
// but for the case of its letters.
func asciiEqualFold(key []byte, name string) bool {
	for i := range key {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// argsScanner reads the parts of a JSON body that fastArgs handles itself.
type argsScanner struct {
	b []byte
	i int // next byte to read
}

// space skips JSON white space.
func (p *argsScanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// eat skips c if it is the next byte.
func (p *argsScanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// plainString reads a string of printable ASCII characters other than '"'
// and '\', and returns its contents. Such a string has no escapes, nothing
// encoding/json would change. It returns false for any other string, or
// none.
func (p *argsScanner) plainString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// names reads null, or an array of plain strings (plainString) as node
// names. It returns nil for null. Otherwise it returns the names, interned
// (nodeNames), in a slice from namesPool that the caller hands back with
// ReleaseNames.
func (p *argsScanner) names() (*[]string, bool) {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return nil, true
	}
	if !p.eat('[') {
		return nil, false
	}
	start := p.i
	// First check the array and count its names, then look them up.
	n := 0
	p.space()
	if !p.eat(']') {
		for {
			p.space()
			if _, ok := p.plainString(); !ok {
				return nil, false
			}
			n++
			p.space()
			if p.eat(',') {
				continue
			}
			if p.eat(']') {
				break
			}
			return nil, false
		}
	}
	end := p.i
	names := getNames(n)
	q := argsScanner{b: p.b[:end], i: start}
	nodeNames.intern(names, n, func() []byte {
		for q.b[q.i] != '"' {
			q.i++
		}
		s, _ := q.plainString()
		return s
	})
	return names, true
}

// namesPool holds the slices filter and prioritize read node names into.
// 5,000 names are an 80 KB slice, every scheduling cycle.
var namesPool = sync.Pool{New: func() any { return new([]string) }}

// maxPooledNames is the largest slice kept in namesPool.
const maxPooledNames = 1 << 15

// getNames returns an empty slice of at least n names' capacity from
// namesPool.
func getNames(n int) *[]string {
	s := namesPool.Get().(*[]string)
	if *s == nil || cap(*s) < n {
		*s = make([]string, 0, n) // an empty list is not null
	}
	*s = (*s)[:0]
	return s
}

// ReleaseNames hands args.NodeNames back to namesPool once nothing reads
// them, that is once the answer is written: the handler's last step.
func ReleaseNames(args *extenderv1.ExtenderArgs) {
	s := args.NodeNames
	args.NodeNames = nil
	if s == nil || cap(*s) > maxPooledNames {
		return
	}
	clear((*s)[:cap(*s)])
	*s = (*s)[:0]
	namesPool.Put(s)
}

// nodeNames interns the node names of filter and prioritize requests.
var nodeNames = &nameTable{limit: 1 << 17}

// nameTable interns node names. kube-scheduler sends the same few thousand
// names every cycle. A name read from a request body is looked up here
// instead of copied; a map lookup by the body's bytes allocates nothing.
// Reads take no lock: the map is replaced, never changed. A request with
// names not in it builds the next map, once per new node. Node names churn,
// as autoscaled nodes get new ones. So once a new map would hold more than
// limit names, it starts over with the request's own.
type nameTable struct {
	limit int
	mu    sync.Mutex // serialises the writers
	names atomic.Pointer[map[string]string]
}

// intern appends n names to *out, each next() bytes' interned string.
func (t *nameTable) intern(out *[]string, n int, next func() []byte) {
	var known map[string]string
	if m := t.names.Load(); m != nil {
		known = *m
	}
	var missing [][]byte // the names not in known, in order
	var at []int         // their indexes in *out
	for range n {
		b := next()
		if s, ok := known[string(b)]; ok {
			*out = append(*out, s)
			continue
		}
		missing = append(missing, b)
		at = append(at, len(*out))
		*out = append(*out, "")
	}
	if len(missing) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var cur map[string]string
	if m := t.names.Load(); m != nil {
		cur = *m
	}
	grown := make(map[string]string, len(cur)+len(missing))
	if len(cur)+len(missing) <= t.limit {
		for k, v := range cur {
			grown[k] = v
		}
	} else {
		// Start over with this request's names: the nodes kube-scheduler
		// sends now.
		for _, s := range *out {
			if s != "" {
				grown[s] = s
			}
		}
	}
	for i, b := range missing {
		s, ok := grown[string(b)]
		if !ok {
			s = string(b)
			grown[s] = s
		}
		(*out)[at[i]] = s
	}
	t.names.Store(&grown)
}

// value reads any JSON value and returns its text, checked by encoding/json.
func (p *argsScanner) value() (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(p.b[p.i:]))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, false
	}
	p.i += int(dec.InputOffset())
	return raw, true
}
