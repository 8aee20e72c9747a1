package main

import (
	"strings"
	"testing"
)

// TestServeHoldFlags: -max-held and -max-hold reach the HTTP API. With
// -max-held 0 a request to be held is refused 503 before it takes a slot;
// with -max-hold 1s a slot 10 s ahead is not taken, whatever max_wait_ms
// says (denied at once: nothing in this test waits).
func TestServeHoldFlags(t *testing.T) {
	const wait = `{"key": "crawler", "limit": {"algorithm": "gcra", "limit": 1, "period": "10s", "burst": 1}, "max_wait_ms": 60000}`
	none := startServe(t, "-max-held", "0")
	if code, body := none.allow(t, wait); code != 503 || !strings.Contains(body, `"field":"max_wait_ms"`) {
		t.Errorf("-max-held 0: %d %s, want 503 naming max_wait_ms", code, body)
	}
	short := startServe(t, "-max-hold", "1s")
	if code, body := short.allow(t, wait); code != 200 || !strings.Contains(body, `"waited_ms":0`) {
		t.Fatalf("first: %d %s, want allowed now", code, body)
	}
	if code, body := short.allow(t, wait); code != 200 || !strings.Contains(body, `"allowed":false`) {
		t.Errorf("-max-hold 1s, the slot 10 s ahead: %d %s, want denied at once", code, body)
	}
}
