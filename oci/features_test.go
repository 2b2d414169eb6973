package oci

import "testing"

func TestParseFeatures(t *testing.T) {
	tests := []struct {
		doc  string
		want Features
		err  bool
	}{
		{doc: `{"ociVersionMax":"1.0.2-dev","mountOptions":["rbind","rro"],"linux":{"namespaces":["mount","user"]}}`,
			want: Features{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{doc: `{"mountOptions":["ridmap","bind"],"linux":{"namespaces":["mount"]}}`, want: Features{IDMappedMounts: true}},
		{doc: `{}`},
		{doc: `not json`, err: true},
	}
	for _, tt := range tests {
		f, err := ParseFeatures([]byte(tt.doc))
		if (err != nil) != tt.err {
			t.Fatalf("%s: err = %v", tt.doc, err)
		}
		if err == nil && *f != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.doc, *f, tt.want)
		}
	}
}
