package util

import (
	"math"
	"sync/atomic"
	"time"
)

// latencyBuckets: log-scale buckets 1% apart from 1 µs to about 100 s.
const latencyBuckets = 1852

// Latencies is a histogram of durations in fixed memory (a benchmark's
// heap growth must not count its own records), safe for concurrent Add.
// Quantiles are exact to 1%.
type Latencies struct {
	counts [latencyBuckets]atomic.Int64
}

func bucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log(us)/math.Log(1.01))+1, latencyBuckets-1)
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) { l.counts[bucket(d)].Add(1) }

// Count returns how many durations were added.
func (l *Latencies) Count() int64 {
	var n int64
	for i := range l.counts {
		n += l.counts[i].Load()
	}
	return n
}

// Quantile returns the upper bound of the bucket holding the q-quantile
// (0 < q ≤ 1), 0 when empty.
func (l *Latencies) Quantile(q float64) time.Duration {
	total := l.Count()
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range l.counts {
		if seen += l.counts[i].Load(); seen >= rank {
			return time.Duration(math.Pow(1.01, float64(i)) * float64(time.Microsecond))
		}
	}
	return time.Duration(math.Pow(1.01, latencyBuckets-1) * float64(time.Microsecond))
}
