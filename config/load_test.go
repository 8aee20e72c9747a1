package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestLoadUpstreamFormat loads the configs written in envoyproxy/ratelimit's
// documented format, unchanged, and checks every rule they define.
func TestLoadUpstreamFormat(t *testing.T) {
	t.Parallel()
	c, err := LoadDir("testdata/ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	fw := func(n int64, p time.Duration) floodgate.Limit { return floodgate.Limit{Limit: n, Period: p} }
	const day = 24 * time.Hour
	type rule struct {
		limit     floodgate.Limit
		unlimited bool
		shadow    bool
		detailed  bool
		replaces  []string
	}
	want := map[string]rule{
		"db_ops|table=orders":                  {limit: fw(200, time.Second)},
		"db_ops|table=audit_log":               {limit: fw(20, time.Second)},
		"sms|category=promotional|recipient":   {limit: fw(3, day)},
		"sms|recipient":                        {limit: fw(50, day)},
		"edge_per_client|client_ip":            {limit: fw(25, time.Second)},
		"edge_per_client|client_ip=192.0.2.66": {limit: fw(0, time.Second)},
		"storefront|route=checkout":            {limit: fw(100, time.Minute)},
		"storefront|route=checkout|method":     {limit: fw(10, time.Minute)},
		"backoffice|caller=health_checker":     {unlimited: true},
		"backoffice|caller":                    {limit: fw(600, time.Minute)},
		"login|app|account=load-test":          {limit: fw(5, time.Second), shadow: true},
		"login|app|account":                    {limit: fw(2, time.Second)},
		"api_tiers|tier=standard|user=alice":   {limit: floodgate.Limit{Limit: 30, Period: time.Minute, Name: "standard_alice"}},
		"api_tiers|endpoint=export|user=alice": {limit: fw(120, time.Minute), replaces: []string{"standard_alice"}},
		"tenants|tenant":                       {limit: fw(1000, time.Hour), detailed: true},
		"tenants|tenant=acme":                  {limit: fw(5000, time.Hour)},
		"tenants|region|tenant":                {limit: fw(100, time.Hour)},
		"paths|path=/api/*":                    {limit: fw(60, time.Minute)},
		"paths|path=/api/search*":              {limit: fw(10, time.Minute)},
		"paths|path=/api/health":               {unlimited: true},
		"paths|bucket=reports/*":               {limit: fw(100, time.Hour)},
		"quotas|plan=s":                        {limit: fw(1, time.Second)},
		"quotas|plan=m":                        {limit: fw(2, time.Minute)},
		"quotas|plan=h":                        {limit: fw(3, time.Hour)},
		"quotas|plan=d":                        {limit: fw(4, day)},
		"quotas|plan=w":                        {limit: fw(5, 7*day)},
		"quotas|plan=mo":                       {limit: fw(6, 30*day)},
		"quotas|plan=y":                        {limit: fw(7, 365*day)},
		"yaml features|service=8080":           {limit: fw(64, time.Minute), shadow: true},
		"yaml features|service=50.0.0.5":       {limit: fw(64, time.Minute)},
		"yaml features|service=quoted":         {limit: fw(1000, time.Minute)},
	}
	got := 0
	for _, d := range c.Domains() {
		if d.File != filepath.Join("testdata/ratelimit", filepath.Base(d.File)) || d.Line < 1 {
			t.Errorf("domain %q at %s:%d", d.Name, d.File, d.Line)
		}
		for _, r := range d.Rules() {
			got++
			w, ok := want[r.ID]
			if !ok {
				t.Errorf("unexpected rule %s", r.ID)
				continue
			}
			if r.Limit != w.limit || r.Unlimited != w.unlimited || r.ShadowMode != w.shadow || r.DetailedMetric != w.detailed || !slices.Equal(r.Replaces, w.replaces) {
				t.Errorf("rule %s: %v unlimited=%v shadow=%v detailed=%v replaces=%q; want %v unlimited=%v shadow=%v detailed=%v replaces=%q",
					r.ID, r.Limit, r.Unlimited, r.ShadowMode, r.DetailedMetric, r.Replaces, w.limit, w.unlimited, w.shadow, w.detailed, w.replaces)
			}
			if r.File != d.File || r.Line < 1 || r.Domain != d.Name || len(r.Path) == 0 {
				t.Errorf("rule %s: File %q Line %d Domain %q Path %v", r.ID, r.File, r.Line, r.Domain, r.Path)
			}
			if !r.Unlimited {
				if err := r.Limit.Validate(); err != nil {
					t.Errorf("rule %s: %v", r.ID, err)
				}
			}
		}
	}
	if got != len(want) {
		t.Errorf("%d rules, want %d", got, len(want))
	}
	if r := c.Match("tenants", e("region", "eu", "tenant", "x")); !r.Path[0].ValueToMetric || r.Path[1].ValueToMetric {
		t.Errorf("value_to_metric: path %+v, want it on region only", r.Path)
	}
	if r := c.Match("paths", e("bucket", "reports/x")); !r.Path[0].ShareThreshold {
		t.Errorf("share_threshold: path %+v", r.Path)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
}

// TestLoadDirConfigMap lays out a directory as Kubernetes mounts a
// ConfigMap: the files are links to "..data/<name>", "..data" is a link to a
// hidden timestamped directory, and the mount point itself may be reached
// through a link.
func TestLoadDirConfigMap(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mount := filepath.Join(root, "mount")
	write(t, filepath.Join(mount, "..2026_01_02_03_04_05.123", "a.yaml"), "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	write(t, filepath.Join(mount, "..2026_01_02_03_04_05.123", "b.yml"), "domain: b\n")
	symlink(t, "..2026_01_02_03_04_05.123", filepath.Join(mount, "..data"))
	symlink(t, "..data/a.yaml", filepath.Join(mount, "a.yaml"))
	symlink(t, "..data/b.yml", filepath.Join(mount, "b.yml"))
	symlink(t, mount, filepath.Join(root, "config"))

	for _, dir := range []string{mount, filepath.Join(root, "config")} {
		c, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range c.Domains() {
			names = append(names, d.Name)
		}
		if !slices.Equal(names, []string{"a", "b"}) {
			t.Errorf("LoadDir(%s) domains %q, want [a b] (each once)", dir, names)
		}
		if c.Match("a", e("k", "v")) == nil {
			t.Errorf("LoadDir(%s): no match", dir)
		}
	}
}

func TestLoadDirSkips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ok.yaml"), "domain: ok\n")
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: valid: yaml: [\n")
	write(t, filepath.Join(dir, "README.md"), "# not config\n")
	write(t, filepath.Join(dir, "ok.yaml.bak"), "junk\n")
	write(t, filepath.Join(dir, "sub", "nested.yaml"), "junk\n")
	if err := os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ds := c.Domains(); len(ds) != 1 || ds[0].Name != "ok" {
		t.Errorf("domains %v, want only ok", ds)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: shared\n")
	write(t, filepath.Join(dir, "b.yaml"), "# the same domain again\ndomain: shared\n")
	write(t, filepath.Join(dir, "c.yaml"), "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	symlink(t, "missing.yaml", filepath.Join(dir, "dangling.yaml"))

	_, err := LoadDir(dir)
	got := Errors(err)
	wants := []Error{
		*newError(filepath.Join(dir, "dangling.yaml"), 0, 0, "", "no such file or directory"),
		*newError(filepath.Join(dir, "c.yaml"), 4, 24, "descriptors[0].rate_limit.unit", `unknown unit "fortnight"`),
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(wants), err)
	}
	for i, w := range wants {
		g := got[i]
		if g.File != w.File || g.Line != w.Line || g.Column != w.Column || g.Field != w.Field || !strings.Contains(g.Problem, w.Problem) {
			t.Errorf("problem %d: %v, want %v", i, g, &w)
		}
	}

	// With the other problems fixed, the duplicate domain shows.
	os.Remove(filepath.Join(dir, "dangling.yaml"))
	write(t, filepath.Join(dir, "c.yaml"), "domain: c\n")
	_, err = LoadDir(dir)
	got = Errors(err)
	if len(got) != 1 {
		t.Fatalf("got %v, want one problem", err)
	}
	if g := got[0]; g.File != filepath.Join(dir, "b.yaml") || g.Line != 2 || g.Column != 1 || g.Field != "domain" ||
		!strings.Contains(g.Problem, `domain "shared" is already defined in `+filepath.Join(dir, "a.yaml")+":1") {
		t.Errorf("got %v", g)
	}
}

func TestLoadDirNotADirectory(t *testing.T) {
	t.Parallel()
	if _, err := LoadDir("testdata/ratelimit/edge.yaml"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("LoadDir(file) = %v, want not a directory", err)
	}
	if _, err := LoadDir("testdata/nope"); err == nil || !strings.Contains(err.Error(), "testdata/nope: no such file or directory") {
		t.Errorf("LoadDir(missing) = %v", err)
	}
}

func TestLoadFilesAndDirs(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/floodgate/extensions.yaml", "testdata/ratelimit", "testdata/ratelimit/edge.yaml")
	if err != nil {
		t.Fatal(err) // edge.yaml twice is read once
	}
	if c.Domain("payments") == nil || c.Domain("edge_per_client") == nil || c.Domain("nope") != nil {
		t.Errorf("domains %v", c.Domains())
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	for _, tc := range []struct {
		name  string
		paths []string
		want  string // part of the error; "" for none
	}{
		{"a directory", []string{"testdata/ratelimit"}, ""},
		{"files", []string{"testdata/floodgate/extensions.yaml", "testdata/ratelimit/edge.yaml"}, ""},
		{"nothing given", nil, "no file or directory given"},
		{"missing file", []string{"testdata/nope.yaml"}, "testdata/nope.yaml: no such file or directory"},
		{"empty directory", []string{empty}, "no config files (*.yaml or *.yml) found"},
		{"an invalid file", []string{"testdata/invalid/many.yaml"}, "testdata/invalid/many.yaml:6:13: descriptors[0].rate_limit.unit: unknown unit"},
		{"a duplicate domain across files", []string{"testdata/ratelimit/edge.yaml", "testdata/invalid/edge_again.yaml"}, `testdata/invalid/edge_again.yaml:1:1: domain: domain "edge_per_client" is already defined in testdata/ratelimit/edge.yaml:2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.paths...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestValidateInvalidFiles checks that every file of testdata/invalid is
// rejected with positioned problems only.
func TestValidateInvalidFiles(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) == 0 {
		t.Fatal("no files")
	}
	for _, f := range files {
		if filepath.Base(f) == "edge_again.yaml" {
			continue // valid alone: it clashes with testdata/ratelimit/edge.yaml
		}
		err := Validate(f)
		if err == nil {
			t.Errorf("%s: no error", f)
			continue
		}
		for _, e := range Errors(err) {
			if e.File != f || e.Line < 1 {
				t.Errorf("%s: problem without a position: %v", f, e)
			}
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", f, err)
		}
	}
}
