package extender

import (
	"encoding/json"
	"fmt"
	"testing"

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
			}
		})
	}
}
