// Package checkpoint is the DRA driver's record of the claims it prepared:
// one JSON file in the plugin's data directory, replaced atomically on
// every change, so that the claims and the memory they hold outlive the
// driver's process (a restart reads it back).
package checkpoint
