package config

import (
	"reflect"
)

// Reconcile returns the configuration a reload runs with: loaded's value
// for every key tagged reload:"live", running's value for every other key,
// so that a changed key that needs a restart keeps its running value until
// then. live names the live keys that changed, restart the keys that changed
// and were kept; both are TOML key paths ("image.registries_conf") in struct
// order. The tags on the struct are the only place that says which key is
// live, so the sample file, the reload and its log cannot disagree.
func Reconcile(running, loaded Config) (next Config, live, restart []string) {
	next = loaded
	reconcile("", reflect.ValueOf(running), reflect.ValueOf(&next).Elem(), &live, &restart)
	return next, live, restart
}

// reconcile walks one table. Nested tables are walked key by key; maps and
// lists (runtime.handlers, cni.bin_dirs) are one key each, as a drop-in
// replaces them whole.
func reconcile(prefix string, run, next reflect.Value, live, restart *[]string) {
	t := next.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := tomlName(f)
		if prefix != "" {
			key = prefix + "." + key
		}
		rv, nv := run.Field(i), next.Field(i)
		if f.Type.Kind() == reflect.Struct {
			reconcile(key, rv, nv, live, restart)
			continue
		}
		if reflect.DeepEqual(rv.Interface(), nv.Interface()) {
			continue
		}
		if f.Tag.Get("reload") == "live" {
			*live = append(*live, key)
			continue
		}
		*restart = append(*restart, key)
		nv.Set(rv)
	}
}

// LiveKeys lists the keys a reload applies, in struct order.
func LiveKeys() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			key := tomlName(f)
			if prefix != "" {
				key = prefix + "." + key
			}
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(key, f.Type)
			case f.Tag.Get("reload") == "live":
				out = append(out, key)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return out
}
