package prepare

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestPrepareNeverOverCommits drives random prepares (1 to 9 GiB on one of
// the two 16 GiB cards, sometimes a claim prepared already), unprepares and
// restarts against a reference: a claim is admitted exactly when the
// reference says it fits, and the state's per-card use always equals the
// reference's sum, which never passes 16 GiB.
func TestPrepareNeverOverCommits(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			dataDir, cdiDir := t.TempDir(), t.TempDir()
			s := newTestState(t, dataDir, cdiDir)
			// held: claim UID -> card -> MiB (the reference).
			held := map[types.UID]map[string]int64{}
			used := func() map[string]int64 {
				out := map[string]int64{}
				for _, h := range held {
					for d, mib := range h {
						out[d] += mib
					}
				}
				return out
			}
			for step := range 200 {
				switch op := rng.IntN(10); {
				case op < 6:
					name := fmt.Sprint("c", rng.IntN(40))
					dev := fmt.Sprint("gpu-", rng.IntN(2))
					gib := int64(1 + rng.IntN(9))
					uid := types.UID("uid-" + name)
					_, err := s.Prepare(ctx, claim(name, result(dev, gib, name)))
					if _, again := held[uid]; again {
						if err != nil {
							t.Fatalf("step %d: preparing %s again: %v", step, name, err)
						}
						continue
					}
					fits := used()[dev]+gib<<10 <= 16384
					if fits != (err == nil) {
						t.Fatalf("step %d: %s asks %d GiB of %s holding %d MiB: err = %v", step, name, gib, dev, used()[dev], err)
					}
					if err == nil {
						held[uid] = map[string]int64{dev: gib << 10}
					}
				case op < 9:
					name := fmt.Sprint("c", rng.IntN(40))
					if err := s.Unprepare(ctx, types.UID("uid-"+name)); err != nil {
						t.Fatalf("step %d: unpreparing %s: %v", step, name, err)
					}
					delete(held, types.UID("uid-"+name))
				default:
					s = newTestState(t, dataDir, cdiDir)
					if err := s.Restore(ctx); err != nil {
						t.Fatalf("step %d: restoring: %v", step, err)
					}
				}
				want := used()
				for d, mib := range want {
					if mib > 16384 {
						t.Fatalf("step %d: the reference holds %d MiB of %s", step, mib, d)
					}
					if mib == 0 {
						delete(want, d)
					}
				}
				if diff := cmp.Diff(want, s.Used()); diff != "" {
					t.Fatalf("step %d: Used (-reference +state):\n%s", step, diff)
				}
			}
		})
	}
}
