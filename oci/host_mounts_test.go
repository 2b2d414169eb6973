package oci

import (
	"errors"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

func TestNeedsShared(t *testing.T) {
	bidi, h2c, priv := runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	tests := []struct {
		optional string
		p        runtimeapi.MountPropagation
		want     bool
	}{
		{"shared:1", bidi, false},
		{"master:3", bidi, true},
		{"", bidi, true},
		{"master:3", h2c, false},
		{"shared:4 master:3", h2c, false},
		{"", h2c, true},
		{"", priv, false},
	}
	for _, tt := range tests {
		if got := needsShared(tt.optional, tt.p); got != tt.want {
			t.Errorf("needsShared(%q, %v) = %v", tt.optional, tt.p, got)
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		want syscall.Signal
		err  bool
	}{
		{in: "SIGTERM", want: syscall.SIGTERM},
		{in: "term", want: syscall.SIGTERM},
		{in: "9", want: syscall.SIGKILL},
		{in: "SIGNAL_SIGQUIT", want: syscall.SIGQUIT},
		{in: "SIGRTMIN", want: 34},
		{in: "RTMIN+3", want: 37},
		{in: "SIGNAL_SIGRTMIN_PLUS_3", want: 37},
		{in: "SIGNAL_SIGRTMAX_MINUS_2", want: 62},
		{in: "SIGRTMAX", want: 64},
		{in: "RTMIN-1", err: true},
		{in: "RTMIN+40", err: true},
		{in: "0", err: true},
		{in: "SIGFOO", err: true},
	}
	for _, tt := range tests {
		got, err := ParseSignal(tt.in)
		if tt.err {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("%q: err = %v", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestStopSignal(t *testing.T) {
	if s, _ := StopSignal(ImageConfig{}, nil); s != syscall.SIGTERM {
		t.Errorf("default = %v", s)
	}
	if s, _ := StopSignal(ImageConfig{StopSignal: "SIGQUIT"}, &runtimeapi.ContainerConfig{}); s != syscall.SIGQUIT {
		t.Errorf("image = %v", s)
	}
	if s, _ := StopSignal(ImageConfig{StopSignal: "SIGQUIT"}, &runtimeapi.ContainerConfig{StopSignal: runtimeapi.Signal_SIGNAL_SIGUSR1}); s != syscall.SIGUSR1 {
		t.Errorf("config = %v", s)
	}
	if _, err := StopSignal(ImageConfig{StopSignal: "NOPE"}, nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad image signal: %v", err)
	}
}

func TestParseSignalEveryCRIEnum(t *testing.T) {
	for v, name := range runtimeapi.Signal_name {
		if v == 0 {
			continue
		}
		if _, err := ParseSignal(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
