// Package plot draws the simulator's allocation curves, one line per
// policy, as SVG or as PNG with its own bitmap font.
package plot
