package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

const testPasswd = `root:x:0:0:root:/root:/bin/sh
# comment
default-user:x:1000:1000::/home/default-user:/bin/sh
nobody:x:65534:65534:nobody:/:/bin/false
broken-line
`

const testGroup = `root:x:0:
group-defined-in-image:x:50000:default-user,other
wheel:x:10:root,default-user
nogroup:x:65534:
`

func makeRootfs(t *testing.T, passwd, group string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if passwd != "" {
		if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if group != "" {
		if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestResolveUser(t *testing.T) {
	i64 := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }
	root := makeRootfs(t, testPasswd, testGroup)
	tests := []struct {
		name      string
		sc        *runtimeapi.LinuxContainerSecurityContext
		imageUser string
		want      User
		err       error
	}{
		{name: "default root", want: User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 10}, Username: "root"}},
		{name: "run_as_user merge", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234}},
			want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 1000, 1234, 50000}, Username: "default-user"}},
		{name: "run_as_user strict", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234}, SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict},
			want: User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 1234}, Username: "default-user"}},
		{name: "uid not in passwd", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1001)},
			want: User{UID: 1001, GID: 0, AdditionalGids: []uint32{0}}},
		{name: "run_as_username", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "nobody"},
			want: User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}, Username: "nobody"}},
		{name: "run_as_group overrides", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsGroup: i64(3000), SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict},
			want: User{UID: 1000, GID: 3000, AdditionalGids: []uint32{3000}, Username: "default-user"}},
		{name: "image user name:group", imageUser: "default-user:wheel",
			want: User{UID: 1000, GID: 10, AdditionalGids: []uint32{10, 50000}, Username: "default-user"}},
		{name: "image user numeric pair", imageUser: "123:456", want: User{UID: 123, GID: 456, AdditionalGids: []uint32{456}}},
		{name: "run_as_user beats image user", imageUser: "nobody", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(0)},
			want: User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 10}, Username: "root"}},
		{name: "unknown name", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "ghost"}, err: errdefs.ErrInvalid},
		{name: "unknown group", imageUser: "root:ghosts", err: errdefs.ErrInvalid},
		{name: "group without user", sc: &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(1)}, err: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := ResolveUser(root, tt.sc, tt.imageUser)
			if wantErr(t, err, tt.err) {
				return
			}
			if u.UID != tt.want.UID || u.GID != tt.want.GID || u.Username != tt.want.Username || !slices.Equal(u.AdditionalGids, tt.want.AdditionalGids) {
				t.Errorf("user = %+v, want %+v", *u, tt.want)
			}
		})
	}
}

func TestResolveUserNoEtc(t *testing.T) {
	root := makeRootfs(t, "", "")
	u, err := ResolveUser(root, &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 5}}, "")
	if err != nil || u.UID != 5 || u.GID != 0 {
		t.Fatalf("user = %+v, %v", u, err)
	}
	if _, err := ResolveUser(root, nil, "someone"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("name without passwd: err = %v", err)
	}
}

// An image cannot point /etc/passwd at the host's files: symlinks resolve
// inside the rootfs.
func TestResolveUserSymlinkEscape(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "passwd"), []byte("hostuser:x:4242:4242::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]error{
		"../../host/passwd":           errdefs.ErrInvalid, // climbs out: clamped at the rootfs
		filepath.Join(host, "passwd"): errdefs.ErrInvalid, // absolute: taken inside the rootfs
	} {
		os.Remove(filepath.Join(root, "etc/passwd"))
		if err := os.Symlink(target, filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
		if u, err := ResolveUser(root, &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "hostuser"}, ""); !errors.Is(err, want) {
			t.Errorf("symlink %s: user %+v, err %v", target, u, err)
		}
	}
	// An in-root absolute symlink still works.
	if err := os.WriteFile(filepath.Join(root, "etc/real"), []byte("app:x:7:7::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "etc/passwd"))
	if err := os.Symlink("/etc/real", filepath.Join(root, "etc/passwd")); err != nil {
		t.Fatal(err)
	}
	if u, err := ResolveUser(root, &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"}, ""); err != nil || u.UID != 7 {
		t.Errorf("in-root symlink: %+v, %v", u, err)
	}
}

func TestOpenInRootRejectsFIFO(t *testing.T) {
	root := makeRootfs(t, "", "")
	if err := syscallMkfifo(filepath.Join(root, "etc/passwd")); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := ResolveUser(root, nil, "x"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("fifo passwd: err = %v", err)
	}
}
