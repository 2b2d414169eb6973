package systemd

import (
	"errors"
	"testing"

	"github.com/podunit/podunit/errdefs"
)

func TestSliceName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "kubepods-burstable-pod123.slice", want: "kubepods-burstable-pod123.slice"},
		{in: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice", want: "kubepods-besteffort-podabc.slice"},
		{in: "/kubepods.slice/kubepods-podabc.slice", want: "kubepods-podabc.slice"},
		{in: "/test.slice", want: "test.slice"},
		{in: "podunit.slice", want: "podunit.slice"},
		{in: "", bad: true},
		{in: "/", bad: true},
		{in: "foo", bad: true},
		{in: "foo.service", bad: true},
		{in: "/kubepods.slice/../etc.slice", bad: true},
		{in: "/kubepods.slice//x.slice", bad: true},
		{in: "a--b.slice", bad: true},
		{in: "-a.slice", bad: true},
		{in: "a b.slice", bad: true},
		{in: "/other.slice/kubepods-pod1.slice", bad: true},
	} {
		got, err := SliceName(tc.in)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("SliceName(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("SliceName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestSlicePath(t *testing.T) {
	for in, want := range map[string]string{
		"-.slice":                "/",
		"podunit.slice":          "/podunit.slice",
		"podunit-pod-abc.slice":  "/podunit.slice/podunit-pod.slice/podunit-pod-abc.slice",
		"kubepods-pod1234.slice": "/kubepods.slice/kubepods-pod1234.slice",
	} {
		if got := SlicePath(in); got != want {
			t.Errorf("SlicePath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := UnitCgroupPath("-.slice", "u.service"); got != "/u.service" {
		t.Errorf("UnitCgroupPath in the root slice = %q", got)
	}
	if got := UnitCgroupPath("a-b.slice", "u.service"); got != "/a.slice/a-b.slice/u.service" {
		t.Errorf("UnitCgroupPath = %q", got)
	}
}
