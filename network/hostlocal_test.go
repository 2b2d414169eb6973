package network

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestHostLocalDirs(t *testing.T) {
	conf := t.TempDir()
	c := NewCNI(Options{ConfDir: conf})
	if _, err := c.HostLocalDirs(); err == nil {
		t.Fatal("no configuration: want an error")
	}
	os.WriteFile(filepath.Join(conf, "10-a.conflist"), []byte(`{"cniVersion":"1.0.0","name":"podnet","plugins":[
		{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}]]}},
		{"type":"macvlan","ipam":{"type":"host-local","dataDir":"/srv/ipam","ranges":[[{"subnet":"10.8.0.0/24"}]]}},
		{"type":"ptp","ipam":{"type":"dhcp"}},
		{"type":"portmap","capabilities":{"portMappings":true}}]}`), 0o644)
	dirs, err := c.HostLocalDirs()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/var/lib/cni/networks/podnet", "/srv/ipam/podnet"}; !slices.Equal(dirs, want) {
		t.Fatalf("dirs %v, want %v", dirs, want)
	}
}

func TestReleaseTornReservations(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReleaseTornReservations(filepath.Join(dir, "never-used"), false); err != nil || len(got) != 0 {
		t.Fatalf("no directory: %v %v", got, err)
	}
	files := map[string]string{
		"lock":               "",
		"last_reserved_ip.0": "10.9.0.7",
		"10.9.0.5":           "pod-a\neth0",
		"10.9.0.6":           "pod-b", // the format before ifname was added
		"10.9.0.7":           "",      // the plugin was killed between create and write
		"10.9.0.8":           " \n",
		"fd00::7":            "",
	}
	for n, c := range files {
		os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644)
	}
	got, err := ReleaseTornReservations(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "10.9.0.7"), filepath.Join(dir, "10.9.0.8"), filepath.Join(dir, "fd00::7")}
	if !slices.Equal(got, want) {
		t.Fatalf("dry run found %v, want %v", got, want)
	}
	if _, err := os.Stat(want[0]); err != nil {
		t.Fatal("the dry run removed a reservation")
	}
	if got, err = ReleaseTornReservations(dir, false); err != nil || !slices.Equal(got, want) {
		t.Fatalf("released %v (%v), want %v", got, err, want)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if w := []string{"10.9.0.5", "10.9.0.6", "last_reserved_ip.0", "lock"}; !slices.Equal(names, w) {
		t.Fatalf("left %v, want %v", names, w)
	}
}

// A reservation being written holds the plugin's lock: the collector waits
// for it instead of taking the file for torn.
func TestReleaseTornReservationsWaitsForThePlugin(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ip := filepath.Join(dir, "10.9.0.9")
	os.WriteFile(ip, nil, 0o644)
	done := make(chan []string)
	go func() {
		got, _ := ReleaseTornReservations(dir, false)
		done <- got
	}()
	select {
	case got := <-done:
		t.Fatalf("did not wait for the lock: released %v", got)
	case <-time.After(200 * time.Millisecond):
	}
	os.WriteFile(ip, []byte("pod-c\neth0"), 0o644)
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if got := <-done; len(got) != 0 {
		t.Fatalf("released %v, a reservation its plugin finished", got)
	}
	if _, err := os.Stat(ip); err != nil {
		t.Fatal(err)
	}
}
