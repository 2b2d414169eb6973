// Command podunit is the systemd-native CRI runtime: the daemon (serve), its
// operator commands, and the small helpers systemd runs for container units.
package main

import (
	"fmt"
	"github.com/podunit/podunit/imagestore"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = ""

func podunitVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "0.1.0+" + s.Value[:12]
			}
		}
	}
	return "0.1.0-dev"
}

type command struct {
	summary string
	hidden  bool
	run     func(args []string) int
}

var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

func usage() {
	fmt.Fprintf(os.Stderr, "podunit — a systemd-native Kubernetes container runtime\n\nUsage: podunit [command] [flags]\n\nCommands:\n")
	var names []string
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nWithout a command, podunit serves (podunit serve). Run 'podunit COMMAND --help' for a command's flags.\n")
}

func main() {
	// go.podman.io/storage re-executes this binary to apply layers in a
	// private mount namespace; that child must do only that.
	if imagestore.Reexec() {
		return
	}
	args := os.Args[1:]
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" || (len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "-help")) {
		usage()
		os.Exit(0)
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "podunit: unknown command %q (see podunit help)\n", name)
		os.Exit(2)
	}
	os.Exit(c.run(args))
}
