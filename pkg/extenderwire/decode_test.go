package extenderwire

import (
	"net/http/httptest"
	"strings"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// TestDecodeTakesOneValue: a body is one JSON value, white space around
// it allowed; a second value or garbage after it is refused (the fuzzer
// found prioritize answering 200 to `{"Pod":{}}0`).
func TestDecodeTakesOneValue(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{body: `{"Pod":{}}`},
		{body: " {\"Pod\":{}}\n\t "},
		{body: `{"Pod":{}}0`, wantErr: "decoding request: data after the JSON value"},
		{body: `{"Pod":{}} {"Pod":{}}`, wantErr: "decoding request: data after the JSON value"},
		{body: `{"Pod":{}}}`, wantErr: "decoding request: data after the JSON value"},
		{body: `{"Pod":`, wantErr: "decoding request: unexpected EOF"},
	}
	for _, tc := range tests {
		var args extenderv1.ExtenderArgs
		err := Decode(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader(tc.body)), &args)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.wantErr {
			t.Errorf("decode(%q) error = %q, want %q", tc.body, got, tc.wantErr)
		}
	}
}
