package network

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/podunit/podunit/errdefs"
)

// fakePlugin is a CNI plugin written as a shell script: it records its
// command, arguments and stdin, and answers ADD with a fixed result.
const fakePlugin = `#!/bin/sh
log="$(dirname "$0")/calls"
stdin=$(cat)
echo "$CNI_COMMAND $CNI_CONTAINERID $CNI_NETNS $CNI_ARGS $stdin" >> "$log"
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}';;
ADD) echo '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"fd00::5/64"},{"address":"10.99.0.5/24","gateway":"10.99.0.1"}]}';;
esac
`

func setup(t *testing.T, conf string) (*CNI, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	confDir := filepath.Join(dir, "net.d")
	os.MkdirAll(bin, 0o755)
	os.MkdirAll(confDir, 0o755)
	if err := os.WriteFile(filepath.Join(bin, "fakeplug"), []byte(fakePlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	if conf != "" {
		os.WriteFile(filepath.Join(confDir, "10-test.conflist"), []byte(conf), 0o644)
	}
	return NewCNI(Options{ConfDir: confDir, BinDirs: []string{bin}, CacheDir: filepath.Join(dir, "cache")}), filepath.Join(bin, "calls")
}

const conflist = `{"cniVersion":"1.0.0","name":"testnet","plugins":[
 {"type":"fakeplug","capabilities":{"portMappings":true,"bandwidth":true}}]}`

func TestSetupTeardown(t *testing.T) {
	c, calls := setup(t, conflist)
	ctx := context.Background()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	req := &Request{
		PodID: "abc", NetNS: "/run/podunit/netns/abc", Name: "web", Namespace: "default", UID: "u1",
		PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {ContainerPort: 81, Protocol: "tcp"}},
		Bandwidth:    &Bandwidth{IngressRate: 1000, IngressBurst: math.MaxUint32},
	}
	res, err := c.Setup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Network != "testnet" || strings.Join(res.IPs, ",") != "10.99.0.5,fd00::5" {
		t.Fatalf("result %+v", res)
	}
	var raw map[string]any
	if err := json.Unmarshal(res.Raw, &raw); err != nil || raw["ips"] == nil {
		t.Fatalf("raw %s: %v", res.Raw, err)
	}
	req.NetNS = ""
	if err := c.Teardown(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(calls)
	log := string(b)
	for _, want := range []string{
		"ADD abc /run/podunit/netns/abc",
		"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
		`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`,
		`"bandwidth":{"ingressRate":1000,"ingressBurst":4294967295}`,
		"DEL abc  ",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("plugin calls lack %q:\n%s", want, log)
		}
	}
}

func TestNoConfig(t *testing.T) {
	c, _ := setup(t, "")
	if err := c.Ready(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Ready: %v", err)
	}
	if _, err := c.Setup(context.Background(), &Request{PodID: "x"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Setup: %v", err)
	}
}

func TestSingleConfFile(t *testing.T) {
	c, _ := setup(t, "")
	os.WriteFile(filepath.Join(c.opts.ConfDir, "05-one.conf"), []byte(`{"cniVersion":"1.0.0","name":"one","type":"fakeplug"}`), 0o644)
	res, err := c.Setup(context.Background(), &Request{PodID: "x", NetNS: "/x"})
	if err != nil || res.Network != "one" {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestSortIPs(t *testing.T) {
	mk := func(s string) *types100.IPConfig {
		ip, n, _ := net.ParseCIDR(s)
		n.IP = ip
		return &types100.IPConfig{Address: *n}
	}
	got := SortIPs([]*types100.IPConfig{mk("fd00::1/64"), mk("10.0.0.2/24"), nil, mk("10.0.0.3/24")})
	if strings.Join(got, ",") != "10.0.0.2,10.0.0.3,fd00::1" {
		t.Fatal(got)
	}
}

func TestBandwidth(t *testing.T) {
	bw, err := BandwidthFromAnnotations(map[string]string{IngressBandwidthAnnotation: "10M", EgressBandwidthAnnotation: "1Gi"})
	if err != nil || bw.IngressRate != 10e6 || bw.EgressRate != 1<<30 || bw.EgressBurst != math.MaxUint32 {
		t.Fatalf("%+v %v", bw, err)
	}
	if bw, err := BandwidthFromAnnotations(map[string]string{"x": "y"}); bw != nil || err != nil {
		t.Fatalf("no annotations: %+v %v", bw, err)
	}
	for _, bad := range []string{"", "10X", "-1", "1.5M", "99999999999999999999"} {
		if _, err := ParseQuantity(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
