package main

import (
	"flag"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
)

// agentsHeapProfile, when set, is where the agents benchmark writes a heap
// profile of the control plane's process with every agent connected and
// idle (after GC): where the memory per connection goes.
var agentsHeapProfile = flag.String("agents-heapprofile", "", "agents: write a heap profile with every agent connected and idle (after GC)")

func writeHeapProfile(path string) {
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		log.Printf("agents: heap profile: %v", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		log.Printf("agents: heap profile: %v", err)
	}
	log.Printf("agents: heap profile of %d goroutines written to %s", runtime.NumGoroutine(), path)
}
