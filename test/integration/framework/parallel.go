package framework

import (
	"sync"
	"testing"
)

// Parallel runs f(0..n-1) on 32 workers and fails the test on the first error.
func Parallel(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	if err := ParallelErr(n, f); err != nil {
		t.Fatal(err)
	}
}

// ParallelErr runs f(0..n-1) on 32 workers and returns the first error.
func ParallelErr(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}
