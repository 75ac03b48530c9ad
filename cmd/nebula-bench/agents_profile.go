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

// agentsPhaseProfile, when set, is where the agents benchmark writes a CPU
// profile of the control plane's process during one phase
// (agentsProfilePhase): the burst (from its first command until every
// agent holds its revision), the latency runs (every run of single
// changes) or the reconnect storm (from the drop until every agent is
// back): where that phase's time goes.
var (
	agentsPhaseProfile = flag.String("agents-cpuprofile", "", "agents: write a CPU profile of one phase, -agents-cpuprofile-phase (not with -cpuprofile)")
	agentsProfilePhase = flag.String("agents-cpuprofile-phase", "storm", "agents: the phase -agents-cpuprofile profiles: burst, latency or storm")
)

// startPhaseProfile starts the CPU profile of the phase, when it is the
// one asked for; the function it returns stops it.
func startPhaseProfile(phase string) func() {
	if *agentsPhaseProfile == "" || *agentsProfilePhase != phase {
		return func() {}
	}
	f, err := os.Create(*agentsPhaseProfile)
	if err != nil {
		log.Printf("agents: %s profile: %v", phase, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Printf("agents: %s profile: %v", phase, err)
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

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
