package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// FileError names the file, key and line a configuration error comes from.
type FileError struct {
	File string
	Key  string
	Line int
	Msg  string
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": key %q", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads path (missing is fine: defaults) and then every *.toml in
// path+".d/" in lexical order, later files overriding earlier ones.
func Load(path string) (Config, []string, error) {
	c := Default()
	var used []string
	if err := decodeFile(path, &c); err == nil {
		used = append(used, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, used, err
	}
	dropins, err := filepath.Glob(filepath.Join(path+".d", "*.toml"))
	if err != nil {
		return c, used, err
	}
	sort.Strings(dropins)
	for _, f := range dropins {
		if err := decodeFile(f, &c); err != nil {
			return c, used, err
		}
		used = append(used, f)
	}
	return c, used, nil
}

func decodeFile(path string, c *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(c)
	if err != nil {
		return decodeError(path, data, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return &FileError{File: path, Key: k.String(), Line: keyLine(data, k), Msg: "unknown key"}
	}
	return nil
}

var lineInMsg = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

func decodeError(path string, data []byte, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &FileError{File: path, Key: pe.LastKey, Line: pe.Position.Line, Msg: pe.Message}
	}
	if m := lineInMsg.FindStringSubmatch(err.Error()); m != nil {
		var line int
		fmt.Sscan(m[1], &line)
		return &FileError{File: path, Key: m[2], Line: line, Msg: m[3]}
	}
	return &FileError{File: path, Msg: err.Error()}
}

// keyLine finds the line defining key: the key's last element assigned
// inside its table's section (or as a dotted key), else the table header
// for an unknown table.
func keyLine(data []byte, key toml.Key) int {
	lines := strings.Split(string(data), "\n")
	table := ""
	last := key[len(key)-1]
	parent := strings.Join(key[:len(key)-1], ".")
	header := regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?`)
	assign := regexp.MustCompile(`^\s*("?)([A-Za-z0-9_.\-"]+)("?)\s*=`)
	for i, l := range lines {
		if m := header.FindStringSubmatch(l); m != nil {
			table = strings.ReplaceAll(m[1], `"`, "")
			if table == key.String() {
				return i + 1
			}
			continue
		}
		m := assign.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		full := strings.ReplaceAll(m[2], `"`, "")
		if table != "" {
			full = table + "." + full
		}
		if full == key.String() || (table == parent && strings.ReplaceAll(m[2], `"`, "") == last) {
			return i + 1
		}
		if strings.HasPrefix(key.String(), full+".") {
			return i + 1 // inline table holding the key
		}
	}
	return 0
}

// Encode renders c as TOML.
func Encode(c Config) ([]byte, error) {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
