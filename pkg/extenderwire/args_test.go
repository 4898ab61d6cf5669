package extenderwire

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/test/util"
)

// argsBodies are request bodies for filter and prioritize: the ones
// kube-scheduler sends, and the shapes fastArgs must leave to
// encoding/json (fast false).
var argsBodies = []struct {
	name, body string
	fast       bool // fastArgs decodes it itself
}{
	{"names", `{"Pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"8"}}}]}},"Nodes":null,"NodeNames":["node-a","node-b","node-c"]}`, true},
	{"lower-case keys and white space", " {\n\t\"pod\" : {\"metadata\":{\"name\":\"p\"}} ,\r\n \"nodenames\" : [ \"a\" , \"b\" ] } \n", true},
	{"mixed-case keys", `{"pOD":null,"NODENAMES":[]}`, true},
	{"empty list", `{"Pod":{},"NodeNames":[]}`, true},
	{"null list", `{"Pod":{},"NodeNames":null}`, true},
	{"empty object", `{}`, true},
	{"unknown keys skipped", `{"Extra":{"a":[1,2,{"b":"c"}]},"n":-1.5e3,"NodeNames":["x"],"t":true,"s":"v"}`, true},
	{"whole nodes", `{"Pod":{"metadata":{"name":"p"}},"Nodes":{"items":[{"metadata":{"name":"n1"}},{"metadata":{"name":"n2"}}]}}`, true},
	{"escaped name", `{"NodeNames":["a\u0062","c"]}`, false},
	{"escaped key", `{"Node\u004eames":["a"]}`, false},
	{"non-ASCII name", `{"NodeNames":["nöde"]}`, false},
	{"long s key", `{"NodeNames":["a"],"Nodeſ":{"items":[]}}`, false}, // encoding/json: "Nodes"
	{"invalid UTF-8 name", "{\"NodeNames\":[\"a\xff\"]}", false},
	{"key twice", `{"NodeNames":["a"],"NodeNames":["b"]}`, false},
	{"pod twice", `{"Pod":{"metadata":{"name":"p"}},"Pod":{"spec":{"nodeName":"n"}}}`, false},
	{"name not a string", `{"NodeNames":["a",1]}`, false},
	{"trailing comma", `{"NodeNames":["a",]}`, false},
	{"unclosed list", `{"NodeNames":["a"`, false},
	{"data after", `{"NodeNames":["a"]} {}`, false},
	{"garbage after", `{"NodeNames":["a"]}x`, false},
	{"pod of the wrong type", `{"Pod":[1]}`, false},
	{"names of the wrong type", `{"NodeNames":{"a":1}}`, false},
	{"nullx", `{"NodeNames":nullx}`, false},
	{"null body", `null`, false},
	{"array body", `[]`, false},
	{"empty body", ``, false},
	{"open brace", `{`, false},
	{"missing colon", `{"Pod" {}}`, false},
	{"missing comma", `{"Pod":{} "NodeNames":[]}`, false},
	{"control character in name", "{\"NodeNames\":[\"a\tb\"]}", false},
}

// decodedArgs is what a decoder made of a body: the arguments, or its
// error.
type decodedArgs struct {
	Args extenderv1.ExtenderArgs
	Err  string
}

func decodeWith(f func([]byte, *extenderv1.ExtenderArgs) error, body string) decodedArgs {
	var d decodedArgs
	if err := f([]byte(body), &d.Args); err != nil {
		d.Err = err.Error()
	}
	return d
}

func TestDecodeArgsAgreesWithEncodingJSON(t *testing.T) {
	for _, tc := range argsBodies {
		t.Run(tc.name, func(t *testing.T) {
			want := decodeWith(func(b []byte, a *extenderv1.ExtenderArgs) error { return decodeBytes(b, a) }, tc.body)
			got := decodeWith(decodeArgsBytes, tc.body)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decodeArgsBytes(%q) (-encoding/json +decodeArgsBytes):\n%s", tc.body, diff)
			}
			var a extenderv1.ExtenderArgs
			if fast := fastArgs([]byte(tc.body), &a); fast != tc.fast {
				t.Errorf("fastArgs(%q) = %v, want %v", tc.body, fast, tc.fast)
			}
		})
	}
}

// FuzzDecodeArgs: whatever the body, decodeArgsBytes decodes it as
// encoding/json does, or fails with its error.
func FuzzDecodeArgs(f *testing.F) {
	for _, tc := range argsBodies {
		f.Add(tc.body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		want := decodeWith(func(b []byte, a *extenderv1.ExtenderArgs) error { return decodeBytes(b, a) }, body)
		got := decodeWith(decodeArgsBytes, body)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeArgsBytes(%q) (-encoding/json +decodeArgsBytes):\n%s", body, diff)
		}
	})
}

// BenchmarkDecodeArgs decodes a filter's body with 5,000 node names, as
// kube-scheduler sends it each cycle at 5,000 nodes, with decodeArgsBytes
// ("fast") and with encoding/json alone.
func BenchmarkDecodeArgs(b *testing.B) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: util.MakePod("probe").GPUMem(12).Requests("8", "32Gi").Obj(), NodeNames: &names})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    func([]byte, *extenderv1.ExtenderArgs) error
	}{
		{"fast", decodeArgsBytes},
		{"encoding-json", func(b []byte, a *extenderv1.ExtenderArgs) error { return decodeBytes(b, a) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var a extenderv1.ExtenderArgs
				if err := tc.f(body, &a); err != nil || a.NodeNames == nil || len(*a.NodeNames) != len(names) {
					b.Fatalf("decoded %v, err %v", a.NodeNames != nil, err)
				}
				ReleaseNames(&a) // as the handlers do once they have answered
			}
		})
	}
}

// namesBody is a filter body naming nodes.
func namesBody(t testing.TB, nodes ...string) []byte {
	t.Helper()
	body, err := json.Marshal(extenderv1.ExtenderArgs{NodeNames: &nodes})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// decodeNames decodes body with table as the name table and returns the
// names.
func decodeNames(t testing.TB, table *nameTable, body []byte) []string {
	t.Helper()
	saved := nodeNames
	nodeNames = table
	defer func() { nodeNames = saved }()
	var a extenderv1.ExtenderArgs
	if err := decodeArgsBytes(body, &a); err != nil {
		t.Fatal(err)
	}
	names := slices.Clone(*a.NodeNames)
	ReleaseNames(&a)
	return names
}

// TestNameTable: the node names of two requests are the same strings,
// not copies of the bodies' bytes; a table that would pass its limit
// starts over with the request's names; the names are right either way.
func TestNameTable(t *testing.T) {
	// Names of more than one byte: Go makes every one-byte string from
	// one static array.
	table := &nameTable{limit: 4}
	first := decodeNames(t, table, namesBody(t, "node-a", "node-b", "node-c"))
	again := decodeNames(t, table, namesBody(t, "node-c", "node-a"))
	if diff := cmp.Diff([]string{"node-a", "node-b", "node-c"}, first); diff != "" {
		t.Errorf("first names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"node-c", "node-a"}, again); diff != "" {
		t.Errorf("names again (-want +got):\n%s", diff)
	}
	if unsafe.StringData(again[0]) != unsafe.StringData(first[2]) || unsafe.StringData(again[1]) != unsafe.StringData(first[0]) {
		t.Error("a name read twice is two strings: not interned")
	}
	// 3 known + 2 new passes the limit of 4: the table holds this
	// request's names only.
	over := decodeNames(t, table, namesBody(t, "node-a", "node-d", "node-e"))
	if diff := cmp.Diff([]string{"node-a", "node-d", "node-e"}, over); diff != "" {
		t.Errorf("names past the limit (-want +got):\n%s", diff)
	}
	held := slices.Sorted(func(yield func(string) bool) {
		for k := range *table.names.Load() {
			if !yield(k) {
				return
			}
		}
	})
	if diff := cmp.Diff([]string{"node-a", "node-d", "node-e"}, held); diff != "" {
		t.Errorf("the table after starting over (-want +got):\n%s", diff)
	}
	if unsafe.StringData(over[0]) != unsafe.StringData(first[0]) {
		t.Error("a known name of the request that started the table over was copied again")
	}
}

// TestNameTableConcurrent: requests naming overlapping node sets at once
// each get their own names (run with -race).
func TestNameTableConcurrent(t *testing.T) {
	table := &nameTable{limit: 64}
	saved := nodeNames
	nodeNames = table
	defer func() { nodeNames = saved }()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				want := make([]string, 20)
				for i := range want {
					want[i] = fmt.Sprintf("node-%d", (w*7+round+i)%90)
				}
				body, _ := json.Marshal(extenderv1.ExtenderArgs{NodeNames: &want})
				var a extenderv1.ExtenderArgs
				if err := decodeArgsBytes(body, &a); err != nil {
					errs <- err.Error()
					return
				}
				if !slices.Equal(want, *a.NodeNames) {
					errs <- fmt.Sprintf("worker %d round %d: got %v, want %v", w, round, *a.NodeNames, want)
					return
				}
				ReleaseNames(&a)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := len(*table.names.Load()); n > table.limit {
		t.Errorf("the table holds %d names, over its limit %d", n, table.limit)
	}
}
