package main

import (
	"bufio"
	"log"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// raiseFileLimit raises this process's open-file limit to its hard limit
// (children inherit it): 10,000 agents over TLS are 10,000 sockets on each
// side, beyond the usual soft limit of 1,024 (at 9,000 agents the benchmark
// ran out of descriptors). It says what it did.
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		log.Printf("file-descriptor limit: cannot read it: %v", err)
		return
	}
	if l.Cur >= l.Max {
		log.Printf("file-descriptor limit: %d (already the hard limit)", l.Cur)
		return
	}
	was := l.Cur
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		log.Printf("file-descriptor limit: cannot raise it from %d to %d: %v", was, l.Max, err)
		return
	}
	log.Printf("file-descriptor limit raised from %d to %d (the hard limit) for the simulated agents", was, l.Max)
}

// fileLimit is this process's open-file limit now (0 when it cannot be
// read).
func fileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return l.Cur
}

// rss is this process's resident set size in bytes (/proc/self/status
// VmRSS), 0 when it cannot be read.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
