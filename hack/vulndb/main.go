// Command vulndb turns a directory of the Go vulnerability database's OSV
// entries (data/osv of github.com/golang/vulndb, GO-*.json) into the
// database layout govulncheck reads with -db file:///DIR: index/db.json,
// index/modules.json and ID/<id>.json. It is for machines that cannot
// reach vuln.go.dev: `make vulncheck VULNDB=file:///DIR` then checks
// against that copy, as old as the snapshot it came from.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	src := flag.String("osv", "", "directory holding the OSV entries (GO-*.json)")
	out := flag.String("out", "", "directory to write the database to (created)")
	asOf := flag.String("modified", "", "the database's date (YYYY-MM-DD) when the entries carry none, as the repository's data/osv does: the snapshot's commit date")
	flag.Parse()
	if *src == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: vulndb -osv DIR -out DIR")
		os.Exit(2)
	}
	var fallback time.Time
	if *asOf != "" {
		var err error
		if fallback, err = time.Parse("2006-01-02", *asOf); err != nil {
			fmt.Fprintln(os.Stderr, "vulndb: -modified:", err)
			os.Exit(2)
		}
	}
	n, modified, err := build(os.DirFS(*src), *out, fallback)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
	fmt.Printf("vulndb: %d entries, last modified %s, written to %s\n", n, modified.Format("2006-01-02"), *out)
}
