package inspect

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// FuzzExtenderAnswer: --from-extender decodes whatever the URL answers;
// any body gives a report or an error, and every report renders in every
// view without panicking.
func FuzzExtenderAnswer(f *testing.F) {
	f.Add(`{"nodes":[{"name":"gpu-a","unit":"GiB","source":"inventory","cards":[{"index":0,"uuid":"GPU-a0","model":"T4","total":16,"used":20,"healthy":true}],"pods":[{"namespace":"default","name":"p","uid":"u","state":"bound","units":20,"perCard":{"0":20}}]}]}`)
	f.Add(`{"nodes":[{"name":"x","cards":[{"index":-1,"total":-5,"used":9223372036854775807}]}]}`)
	f.Add(`{"nodes":null}`)
	f.Add(`{"error":"node not found"}`)
	f.Add(`<html>`)
	var body atomic.Pointer[string] // what the fake extender answers
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, *body.Load()) }))
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, answer string) {
		body.Store(&answer)
		r, err := ExtenderSource{URL: srv.URL}.Report(context.Background(), Query{})
		if err != nil {
			return
		}
		for _, v := range []View{{}, {Details: true}, {Bars: true}, {Output: OutputJSON}, {Output: OutputYAML}} {
			if err := write(io.Discard, r, v); err != nil {
				t.Fatalf("rendering %+v: %v", v, err)
			}
		}
	})
}
