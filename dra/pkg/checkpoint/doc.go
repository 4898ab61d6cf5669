// Package checkpoint is the DRA driver's record of the claims it prepared:
// one JSON file in the plugin's data directory, replaced atomically on every
// change. A restart reads it back, so the claims and the memory they hold
// outlive the driver's process.
package checkpoint
