package scanner

import "sync"

// Parallel calls fn(i) for every i in [0, n), at most limit calls at a time (at least one),
// and returns once every call has returned. fn keeps its own results, by index.
func Parallel(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}
