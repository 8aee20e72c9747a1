package xds

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-rl/floodgate/config"
)

// FuzzDecode feeds the conversion arbitrary bytes as the value of one
// RateLimitConfig resource. Its seeds are the configs of config's
// testdata (upstream's and ours) turned into the proto, plus
// testdata/fuzz/FuzzDecode (deep nesting, NaN metadata, unknown units).
// decode must never panic; a config it returns must hold the resource's
// domain with one rule per rate_limit of the resource, each from the
// resource; an error must name the resource, and be the same each time.
func FuzzDecode(f *testing.F) {
	for _, dir := range []string{"../testdata/ratelimit", "../testdata/upstream/valid", "../testdata/floodgate"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			if rc, ok := yamlToProto(file); ok {
				data, err := proto.Marshal(rc)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res := &anypb.Any{TypeUrl: TypeURL, Value: data}
		cfg, err := decode([]*anypb.Any{res}, config.Loader{})
		var rc rlsconfv3.RateLimitConfig
		if uerr := proto.Unmarshal(data, &rc); uerr != nil {
			if err == nil || !strings.HasPrefix(err.Error(), "xds: resources[0]: a RateLimitConfig that does not decode") {
				t.Fatalf("bytes that do not decode: %v", err)
			}
			return
		}
		name := rc.GetName()
		if name == "" {
			name = "resources[0]"
		}
		if err != nil {
			if cfg != nil {
				t.Fatal("a config and an error")
			}
			errs := config.Errors(err)
			if len(errs) == 0 {
				t.Fatalf("an error without *config.Error: %v", err)
			}
			for _, e := range errs {
				if e.File != name || e.Line != 0 {
					t.Fatalf("problem %v: want it to name resource %q, with no line", e, name)
				}
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error does not wrap config.ErrInvalid: %v", err)
			}
			_, again := decode([]*anypb.Any{res}, config.Loader{})
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("decoded twice, two answers:\n%v\n%v", err, again)
			}
			return
		}
		d := cfg.Domain(rc.GetDomain())
		if d == nil || len(cfg.Domains()) != 1 {
			t.Fatalf("domains %v, want %q alone", cfg.Domains(), rc.GetDomain())
		}
		if got, want := len(d.Rules()), countLimits(rc.GetDescriptors()); got != want {
			t.Fatalf("%d rules from %d rate_limits", got, want)
		}
		for _, r := range d.Rules() {
			if r.File != name || r.Domain != rc.GetDomain() {
				t.Fatalf("rule %s from %q of domain %q, want from %q of %q", r.ID, r.File, r.Domain, name, rc.GetDomain())
			}
		}
	})
}

func countLimits(ds []*rlsconfv3.RateLimitDescriptor) int {
	n := 0
	for _, d := range ds {
		if d.GetRateLimit() != nil {
			n++
		}
		n += countLimits(d.GetDescriptors())
	}
	return n
}

// yamlToProto reads a config file of upstream's format into the proto,
// through protojson, whose field names are the YAML's; the units are
// spelled as the enum's names. Files with fields the proto lacks (our
// extensions) lose them; files that do not fit report false.
func yamlToProto(file string) (*rlsconfv3.RateLimitConfig, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, false
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	var fix func(any) any
	fix = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				if k == "unit" {
					if s, ok := val.(string); ok {
						x[k] = strings.ToUpper(s)
					}
				}
				x[k] = fix(x[k])
			}
		case []any:
			for i := range x {
				x[i] = fix(x[i])
			}
		}
		return v
	}
	js, err := json.Marshal(fix(v))
	if err != nil {
		return nil, false
	}
	var rc rlsconfv3.RateLimitConfig
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, &rc); err != nil {
		return nil, false
	}
	rc.Name = filepath.Base(file)
	return &rc, true
}
