package oci

import "testing"

// Checkpoint support is read from what the handler says: runc's
// checkpoint.enabled annotation, crun's +CRIU build flag (Debian 12's
// crun 1.8.1 has none).
func TestFeaturesCheckpoint(t *testing.T) {
	f, err := FeaturesFromSpec("runc features", readFeatures(t, "runc-1.1.5.json"), fullKernel)
	if err != nil || !f.Checkpoint {
		t.Errorf("runc 1.1.5: checkpoint %t, %v", f.Checkpoint, err)
	}
	f, err = FeaturesFromSpec("runc features", []byte(`{"annotations":{}}`), fullKernel)
	if err != nil || f.Checkpoint {
		t.Errorf("no annotation: checkpoint %t, %v", f.Checkpoint, err)
	}
	f, err = FeaturesFromCrunVersion(string(readFeatures(t, "crun-1.8.1.version")), fullKernel)
	if err != nil || f.Checkpoint {
		t.Errorf("Debian's crun 1.8.1: checkpoint %t, %v", f.Checkpoint, err)
	}
	f, err = FeaturesFromCrunVersion("crun version 1.14\n+SYSTEMD +CRIU +YAJL\n", fullKernel)
	if err != nil || !f.Checkpoint {
		t.Errorf("crun +CRIU: checkpoint %t, %v", f.Checkpoint, err)
	}
}
