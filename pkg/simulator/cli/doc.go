// Package cli is the simulator's command line: its flags, its usage and
// Main, which loads a trace, replays it and writes the report and the plot.
package cli
