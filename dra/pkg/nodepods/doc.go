// Package nodepods follows the pods bound to the DRA driver's node: which
// claims they use, and what the device plugin's pods still running there
// hold on its cards after the node moved from the device plugin.
package nodepods
