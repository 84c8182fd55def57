package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
)

func TestScratchHeap(t *testing.T) {
	runtime.MemProfileRate = 1
	var wire [][]byte
	for c := range 100 {
		for e := range 10 {
			wire = append(wire, serverApplication(t, fmt.Sprintf("cluster-%03d", c), fmt.Sprintf("enforcement-%d", e)))
		}
	}
	runtime.GC()
	cached := decodeCached(&testing.B{}, wire, func() any { return &argov1.Application{} })
	runtime.GC()
	f, _ := os.Create("/work/tmp/heap.out")
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
	runtime.KeepAlive(cached)
	fmt.Printf("%+v\n", cached[0])
	fmt.Println(string(wire[0]))
}
