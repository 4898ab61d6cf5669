// Package nodepods follows the pods bound to the DRA driver's node: what
// the device plugin's pods still running there hold on its cards (on a
// node that moved from the device plugin), and which claims its pods use.
package nodepods
