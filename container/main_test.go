package container

import (
	"os"
	"testing"

	"github.com/podunit/podunit/exitrec"
	"github.com/podunit/podunit/logrelay/relayd"
	"github.com/podunit/podunit/stdio"
)

// TestMain lets the test binary stand in for podunit in the units it
// creates: ExecStart runs `<test binary> _stdio`, ExecStopPost
// `<test binary> _exitrec`, exactly as the real binary's hidden commands.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "_stdio":
			os.Exit(stdio.Main(os.Args[2:]))
		case "_exitrec":
			os.Exit(exitrec.Main(os.Args[2:]))
		case "_logrelay":
			os.Exit(relayd.Main(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}
