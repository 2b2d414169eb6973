package podfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/podunit/podunit/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestResolvConf(t *testing.T) {
	host := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(host, []byte("nameserver 9.9.9.9\n"), 0o644)
	got, err := ResolvConf(&runtimeapi.DNSConfig{
		Servers:  []string{"10.0.0.10", "10.0.0.11"},
		Searches: []string{"default.svc.cluster.local", "svc.cluster.local"},
		Options:  []string{"ndots:5", "edns0"},
	}, host)
	if err != nil {
		t.Fatal(err)
	}
	want := "search default.svc.cluster.local svc.cluster.local\nnameserver 10.0.0.10\nnameserver 10.0.0.11\noptions ndots:5 edns0\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	got, err = ResolvConf(nil, host)
	if err != nil || string(got) != "nameserver 9.9.9.9\n" {
		t.Fatalf("host fallback: %q %v", got, err)
	}
	_, err = ResolvConf(&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1\nnameserver 6.6.6.6"}}, host)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("injected newline: %v", err)
	}
}

func TestHosts(t *testing.T) {
	got := string(Hosts("web-0", []string{"10.88.0.5", "fd00::5"}))
	for _, want := range []string{"127.0.0.1\tlocalhost\n", "10.88.0.5\tweb-0\n", "fd00::5\tweb-0\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("hosts lacks %q:\n%s", want, got)
		}
	}
}

func TestNodeHosts(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "hosts")
	os.WriteFile(node, []byte("127.0.0.1\tlocalhost\n192.0.2.7\tnode-1\n"), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       string // "" with errPart set: an error
		errPart    string
	}{
		{name: "node file", path: node, want: "127.0.0.1\tlocalhost\n192.0.2.7\tnode-1\n"},
		{name: "missing", path: filepath.Join(dir, "none"), want: string(Hosts("", nil))},
		{name: "missing dir", path: filepath.Join(dir, "no", "hosts"), want: string(Hosts("", nil))},
		{name: "directory", path: dir, errPart: "not a regular file"},
		{name: "fifo", path: fifo, errPart: "not a regular file"},
		{name: "below a file", path: filepath.Join(node, "x"), errPart: "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NodeHosts(tc.path)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) || !strings.Contains(err.Error(), "node hosts file") {
					t.Fatalf("NodeHosts(%s) = %q, %v; want an error about the node hosts file with %q", tc.path, got, err, tc.errPart)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("NodeHosts(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
	if !strings.HasPrefix(string(Hosts("", nil)), "127.0.0.1\tlocalhost\n::1\t") {
		t.Fatalf("default hosts lack the loopback entries:\n%s", Hosts("", nil))
	}
}

func TestValidHostname(t *testing.T) {
	if err := ValidHostname("web-0.example"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"a b", "x\ny", strings.Repeat("a", 65), "a/b"} {
		if err := ValidHostname(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pod")
	p, err := WriteFile(dir, "hostname", Hostname("web"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "web\n" || st.Mode().Perm() != 0o644 {
		t.Fatalf("%q %v", b, st.Mode())
	}
}

func TestClassify(t *testing.T) {
	in := map[string]string{
		"net.ipv4.ip_forward":              "1",
		"net/ipv4/conf/eth0.100/rp_filter": "0",
		"kernel.shm_rmid_forced":           "1",
		"kernel.msgmax":                    "8192",
		"fs.mqueue.msg_max":                "20",
		"kernel.domainname":                "example",
	}
	got, err := Classify(in, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[NetNS]) != 2 || len(got[IPCNS]) != 3 || len(got[UTSNS]) != 1 {
		t.Fatalf("%v", got)
	}
	cases := []struct {
		in               map[string]string
		hostNet, hostIPC bool
	}{
		{map[string]string{"kernel.pid_max": "100000"}, false, false},
		{map[string]string{"vm.overcommit_memory": "1"}, false, false},
		{map[string]string{"kernel.hostname": "x"}, false, false},
		{map[string]string{"net.core.somaxconn": "1024"}, true, false},
		{map[string]string{"kernel.shmmax": "1"}, false, true},
		{map[string]string{"net.ipv4.ip_forward": "1\nvm.x=1"}, false, false},
		{map[string]string{"net/../vm/x": "1"}, false, false},
	}
	for _, c := range cases {
		if _, err := Classify(c.in, c.hostNet, c.hostIPC); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%v host=%v/%v: %v, want ErrInvalid", c.in, c.hostNet, c.hostIPC, err)
		}
	}
}

func TestApply(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "net/ipv4/conf/eth0.100"), 0o755)
	os.WriteFile(filepath.Join(root, "net/ipv4/conf/eth0.100/rp_filter"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "net/ipv4/ip_forward"), nil, 0o644)
	err := Apply(root, map[string]string{"net/ipv4/conf/eth0.100/rp_filter": "2", "net.ipv4.ip_forward": "1"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "net/ipv4/conf/eth0.100/rp_filter"))
	if string(b) != "2" {
		t.Fatalf("rp_filter=%q", b)
	}
	if err := Apply(root, map[string]string{"net.nope": "1"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("missing sysctl: %v", err)
	}
}

func dnsConfig(server, search, opt string) *runtimeapi.DNSConfig {
	return &runtimeapi.DNSConfig{Servers: []string{server}, Searches: []string{search}, Options: []string{opt}}
}
