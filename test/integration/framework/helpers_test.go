package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
)

func TestDecodeManifest(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    []string // Kind/name, in file order
		wantErr string
	}{
		{
			name: "documents, an empty one skipped",
			yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b, namespace: a}\n",
			want: []string{"*v1.Namespace/a", "*v1.ServiceAccount/b"},
		},
		{
			name: "a List is expanded in place",
			yaml: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p1}}\n- {apiVersion: v1, kind: Pod, metadata: {name: p2}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: c}\n",
			want: []string{"*v1.Pod/p1", "*v1.Pod/p2", "*v1.Namespace/c"},
		},
		{
			name:    "unknown kind",
			yaml:    "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
			wantErr: "decoding an object of",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			objs, err := DecodeManifest(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				m, err := meta.Accessor(o)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%T/%s", o, m.GetName()))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}
