package node

import (
	"errors"
	"testing"
)

func TestParseCRILog(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        error
	}{
		{name: "full lines", in: "2026-11-27T01:00:00.1Z stdout F hello\n2026-11-27T01:00:00.2Z stderr F world\n", want: "hello\nworld\n"},
		{name: "partial joined", in: "t stdout P abc\nt stdout F def\n", want: "abcdef\n"},
		{name: "empty line", in: "t stdout F\n", want: "\n"},
		{name: "content with spaces", in: "t stdout F a b  c\n", want: "a b  c\n"},
		{name: "not CRI", in: "hello world\n", wantErr: ErrBadCRILog},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCRILog(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
