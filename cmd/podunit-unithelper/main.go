// Command podunit-unithelper is what systemd runs inside every container's
// unit: `_stdio` (ExecStart, the wrapper around the OCI runtime's create)
// and `_exitrec` (ExecStopPost, the exit recorder). `podunit _stdio` and
// `podunit _exitrec` run the same code, but the full podunit binary maps
// ~58 MB and runs every package's init, and in a unit that cost is charged
// to the container: its memory limit, and its CPU quota, which with a
// 100m limit on an emulated node made the start job outlast its timeout.
// podunit puts this one in the unit when it lies next to podunit.
package main

import (
	"fmt"
	"os"

	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/stdio"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podunit-unithelper _stdio|_exitrec ARGS...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "_stdio":
		os.Exit(stdio.Main(os.Args[2:]))
	case "_exitrec":
		os.Exit(exitrec.Main(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "podunit-unithelper: unknown command %q (want _stdio or _exitrec)\n", os.Args[1])
	os.Exit(2)
}
