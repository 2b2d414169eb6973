package streaming

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	cases := []struct {
		line  string
		msg   string
		isErr bool
		ok    bool
	}{
		{`{"MESSAGE":"hello","PRIORITY":"6"}`, "hello\n", false, true},
		{`{"MESSAGE":"oops","PRIORITY":"3"}`, "oops\n", true, true},
		{`{"MESSAGE":"$ ","PRIORITY":"6","_LINE_BREAK":"eof"}`, "$ ", false, true},
		{`{"MESSAGE":[104,105,255],"PRIORITY":"6"}`, "hi\xff\n", false, true},
		{`{"MESSAGE":null}`, "", false, false},
		{`not json`, "", false, false},
	}
	for _, c := range cases {
		msg, isErr, ok := parseEntry([]byte(c.line))
		if string(msg) != c.msg || isErr != c.isErr || ok != c.ok {
			t.Errorf("parseEntry(%s) = %q %v %v", c.line, msg, isErr, ok)
		}
	}
	var out, errb bytes.Buffer
	in := `{"MESSAGE":"a","PRIORITY":"6"}` + "\n" + `{"MESSAGE":"b","PRIORITY":"3"}` + "\n" + `{"MESSAGE":"c","PRIORITY":"6"}` + "\n"
	if err := copyJournal(strings.NewReader(in), &out, &errb); err != nil || out.String() != "a\nc\n" || errb.String() != "b\n" {
		t.Fatalf("copyJournal: %q %q %v", out.String(), errb.String(), err)
	}
}

func TestFollowArgv(t *testing.T) {
	got := FollowArgv([]string{"CONTAINER_ID=x"}, "s=1;i=2")
	want := []string{"--follow", "--quiet", "--output=json", "--no-pager", "--lines=all", "--after-cursor=s=1;i=2", "CONTAINER_ID=x"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
	if got := journalMatch(Target{ID: "x"}); !slices.Equal(got, []string{"CONTAINER_ID=x"}) {
		t.Fatalf("default match %q", got)
	}
}
