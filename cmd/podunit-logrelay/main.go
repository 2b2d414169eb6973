// Command podunit-logrelay is the node's log relay (package logrelay) as a
// binary of its own: `podunit _logrelay` runs the same code, but in the
// full podunit binary every package's init runs (the Kubernetes streaming
// handlers alone cost megabytes), which a process that only copies bytes
// should not pay. podunit starts this one when it lies next to it.
package main

import (
	"os"

	"github.com/podunit/podunit/logrelay/relayd"
)

func main() { os.Exit(relayd.Main(os.Args[1:])) }
