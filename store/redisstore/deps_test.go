package redisstore

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoGoRedis keeps the promise of package goredisstore: a program that
// uses this package with its own client, rueidis, never compiles go-redis.
func TestNoGoRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/redis/go-redis/") {
			t.Errorf("redisstore imports %s", dep)
		}
	}
}
