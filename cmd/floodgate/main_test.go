package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"no command", nil, 2, nil, "usage: floodgate"},
		{"unknown command", []string{"frobnicate"}, 2, nil, `unknown command "frobnicate"`},
		{"help", []string{"help"}, 0, []string{"commands:"}, ""},
		{"fixed window", []string{"check", "-limit", "3", "-period", "1s", "-requests", "5", "-every", "100ms"}, 0,
			[]string{"3 of 5 allowed", "  4  300ms    false          0        700ms        700ms"}, ""},
		{"cost above capacity", []string{"check", "-algorithm", "gcra", "-limit", "2", "-cost", "3", "-requests", "1"}, 0,
			[]string{"never", "0 of 1 allowed"}, ""},
		{"concurrency", []string{"check", "-algorithm", "concurrency", "-limit", "2", "-period", "1s", "-requests", "4", "-every", "400ms"}, 0,
			[]string{"3 of 4 allowed"}, ""},
		{"invalid limit", []string{"check", "-period", "0s"}, 2, nil, "period: 0s must be above zero"},
		{"invalid algorithm", []string{"check", "-algorithm", "leaky"}, 2, nil, `unknown algorithm "leaky"`},
		{"bad requests", []string{"check", "-requests", "0"}, 2, nil, "-requests: 0"},
		{"stray argument", []string{"check", "extra"}, 2, nil, `unexpected argument "extra"`},
		{"bad flag", []string{"check", "-nope"}, 2, nil, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(t.Context(), tc.args, &stdout, &stderr); got != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tc.code, &stdout, &stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, &stdout)
				}
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, &stderr)
			}
		})
	}
}
