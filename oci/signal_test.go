package oci

import (
	"errors"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podunit/podunit/errdefs"
)

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
