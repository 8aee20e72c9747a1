package main

import (
	"flag"
	"strings"
	"testing"
)

// TestServeEmptyConfigWarns: `serve -config` of a directory without config
// files starts (a directory filled later is loaded then) but warns in the
// words `config validate` fails with; a directory with a file does not.
func TestServeEmptyConfigWarns(t *testing.T) {
	const words = "no config files (*.yaml or *.yml) found"
	empty := t.TempDir()
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"config", "validate", empty}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), words) {
		t.Errorf("config validate of an empty directory: exit %d, stderr %q; want 1 saying %q", code, &stderr, words)
	}
	in := startServe(t, "-config", empty)
	if log := in.stderr.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, words) || !strings.Contains(log, "every request is allowed") {
		t.Errorf("serve of an empty directory logged:\n%s\nwant a warning saying %q", log, words)
	}
	dir, _ := writeConfig(t, benchDownYAML)
	if log := startServe(t, "-config", dir).stderr.String(); strings.Contains(log, words) {
		t.Errorf("serve of a directory with a config warned:\n%s", log)
	}
}

// TestServeFlagAliases: -ratelimit-headers and -rlqs are read, so are
// their deprecated names -response-headers and -rlqs-off (on the command
// line and in the environment), and the new name wins when both are set.
func TestServeFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args, env     []string
		headers, rlqs bool
	}{
		{"defaults", nil, nil, true, true},
		{"new names", []string{"-ratelimit-headers=false", "-rlqs=false"}, nil, false, false},
		{"old names", []string{"-response-headers=false", "-rlqs-off"}, nil, false, false},
		{"old names in the environment", nil, []string{"FLOODGATE_RESPONSE_HEADERS=false", "FLOODGATE_RLQS_OFF=true"}, false, false},
		{"new name wins over the old", []string{"-ratelimit-headers=true", "-rlqs=true"}, []string{"FLOODGATE_RESPONSE_HEADERS=false", "FLOODGATE_RLQS_OFF=true"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var stderr strings.Builder
			c, _, ok := parseServe(tc.args, &stderr)
			if !ok {
				t.Fatalf("parseServe(%v): %s", tc.args, &stderr)
			}
			if c.headers != tc.headers || c.rlqs.on != tc.rlqs {
				t.Errorf("headers %v, rlqs %v; want %v, %v", c.headers, c.rlqs.on, tc.headers, tc.rlqs)
			}
		})
	}
}

// TestServeFlagHelpOrder: every flag of serve ends its help with its
// environment variable, and leaves its default to the flag package, which
// prints it after: "(env FLOODGATE_X) (default Y)" on every line.
func TestServeFlagHelpOrder(t *testing.T) {
	serveFlags().VisitAll(func(f *flag.Flag) {
		env := "(env FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")) + ")"
		if !strings.HasSuffix(f.Usage, env) {
			t.Errorf("-%s: help does not end with %s: %q", f.Name, env, f.Usage)
		}
		if strings.Contains(f.Usage, "(default") {
			t.Errorf("-%s: help writes its own (default …), which then stands before (env …): %q", f.Name, f.Usage)
		}
	})
}
