package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// dashboardYAML is the config of the browser test: users with room, one
// user with almost none (mallory), one who soon reaches her limit
// (carol), and a rule in shadow mode.
const dashboardYAML = `domain: shop
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 100000}
  - key: user
    value: mallory
    rate_limit: {name: mallory, unit: hour, requests_per_unit: 5}
  - key: user
    value: carol
    rate_limit: {name: carol, unit: minute, requests_per_unit: 300}
  - key: tenant
    shadow_mode: true
    rate_limit: {name: per_tenant, unit: hour, requests_per_unit: 10}
`

const (
	dashClientToken = "dash-client-0123456789abcdef"
	dashAdminToken  = "dash-admin-0123456789abcdef"
)

// chromium is the path of a Chromium or Chrome, or "" without one.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// consoleLog keeps what the page wrote to its console, by phase.
type consoleLog struct {
	mu    sync.Mutex
	phase string
	msgs  []string // "phase: type: text (source)"
	bad   map[string][]string
}

// problems are the messages of phase that a clean page does not write:
// errors, warnings and uncaught exceptions; with refusals, a network
// log entry of a 401 or 403 (which the phase provoked) is expected.
func (c *consoleLog) problems(phase string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad[phase]
}

func (c *consoleLog) setPhase(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phase = p
}

func (c *consoleLog) add(m chromedp.ConsoleMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := fmt.Sprintf("%s: %s (%s %s)", m.Type, m.Text, m.Source, m.URL)
	c.msgs = append(c.msgs, c.phase+": "+line)
	switch m.Type {
	case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
	default:
		return
	}
	if strings.HasPrefix(c.phase, "refused") && m.Source == "network" && (strings.Contains(m.Text, "401") || strings.Contains(m.Text, "403")) {
		return
	}
	c.bad[c.phase] = append(c.bad[c.phase], line)
}

// TestDashboardInBrowser drives the dashboard of a real `floodgate serve`
// under load in headless Chromium: the page loads with no console
// errors, the charts and the top-keys table move as the load changes, a
// denied key appears in the top list, an admin inspects and resets it,
// and a reset with a client token or none is refused (403, 401) and
// changes nothing. Screenshots go to the test's temp dir (their paths
// are logged); FLOODGATE_UPDATE_SCREENSHOT=1 also writes the one under
// load to docs/dashboard.png, the README's.
func TestDashboardInBrowser(t *testing.T) {
	browser := chromium()
	if browser == "" {
		if os.Getenv("FLOODGATE_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("no chromium in PATH, and FLOODGATE_REQUIRE_CHROMIUM=1 (apt-get install -y chromium)")
		}
		t.Skip("no chromium in PATH: the dashboard's browser test is skipped (apt-get install -y chromium; CI sets FLOODGATE_REQUIRE_CHROMIUM=1)")
	}
	dir := t.TempDir()
	for name, body := range map[string]string{"config/shop.yaml": dashboardYAML, "client": dashClientToken + "\n", "admin": dashAdminToken + "\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := startServe(t, "-config", filepath.Join(dir, "config"), "-auth-token-file", filepath.Join(dir, "client"), "-admin-token-file", filepath.Join(dir, "admin"))

	// The load: users with room all along; mallory and the shadow rule's
	// tenant while heavy is set.
	var heavy atomic.Bool
	var sent atomic.Int64
	loadCtx, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan struct{})
	t.Cleanup(func() { stopLoad(); <-loadDone })
	go func() {
		defer close(loadDone)
		client := &http.Client{Timeout: 5 * time.Second}
		post := func(entry string) {
			req, err := http.NewRequestWithContext(loadCtx, "POST", in.httpURL+"/v1/allow", strings.NewReader(`{"domain": "shop", "descriptors": [{"entries": [`+entry+`]}]}`))
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+dashClientToken)
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				sent.Add(1)
			}
		}
		for i := 0; loadCtx.Err() == nil; i++ {
			post(fmt.Sprintf(`{"key": "user", "value": "u%d"}`, i%20))
			post(`{"key": "user", "value": "carol"}`)
			if heavy.Load() {
				post(`{"key": "user", "value": "mallory"}`)
				post(`{"key": "user", "value": "mallory"}`)
				post(`{"key": "tenant", "value": "acme"}`)
			}
			select {
			case <-loadCtx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	// quiet stops the heavy load, and returns once an iteration that may
	// have read the flag before has finished: six more requests.
	quiet := func() {
		t.Helper()
		heavy.Store(false)
		n := sent.Load()
		deadline := time.Now().Add(browserTimeout)
		for sent.Load() < n+6 {
			if time.Now().After(deadline) {
				t.Fatalf("the load sent %d requests in %v", sent.Load()-n, browserTimeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1600))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	console := &consoleLog{phase: "load", bad: map[string][]string{}}
	messages := chromedp.Console(ctx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			console.add(m)
		}
	}()
	defer func() {
		cancelBrowser()
		<-consoleDone
		if t.Failed() {
			console.mu.Lock()
			t.Logf("console:\n%s", strings.Join(console.msgs, "\n"))
			console.mu.Unlock()
		}
	}()

	shots := t.TempDir()
	screenshot := func(name string) string {
		t.Helper()
		png, err := runIn(t, ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
		return p
	}

	// A client token in the tab's storage before the page loads, as an
	// operator who typed it earlier: the feed takes client tokens.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `if (location.pathname === "/ui" && !sessionStorage.getItem("floodgate-token")) sessionStorage.setItem("floodgate-token", "` + dashClientToken + `")`,
	}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "open the page", chromedp.Navigate(in.httpURL+"/ui"))
	waitJS(t, ctx, "the feed is live", `document.getElementById("status").dataset.state === "live"`)
	waitJS(t, ctx, "read-only without an admin token", `document.getElementById("access").textContent === "read-only" &&
		document.querySelector("#top-denied tbody").textContent.includes("admin token is needed")`)
	waitJS(t, ctx, "the chart draws allowed decisions", `Number(document.getElementById("chart-total").dataset.points) >= 3 &&
		Number(document.getElementById("chart-total").dataset.allowed) > 0`)
	points := evalString(t, ctx, `document.querySelector("#chart-total polyline.allowed").getAttribute("points")`)
	waitJS(t, ctx, "the chart moves", `document.querySelector("#chart-total polyline.allowed").getAttribute("points") !== `+jsString(points))
	if p := console.problems("load"); len(p) > 0 {
		t.Errorf("the page wrote to its console while loading:\n%s", strings.Join(p, "\n"))
	}

	// Opened again from the server's address (a redirect to /ui), the
	// page draws the seconds the server kept at once; a frame without
	// rates (the first after a start) says it is waiting, not zero.
	step(t, ctx, "open the server's address", chromedp.Navigate(in.httpURL+"/"))
	waitJS(t, ctx, "the feed is live again", `location.pathname === "/ui" && document.getElementById("status").dataset.state === "live"`)
	waitJS(t, ctx, "the last seconds drawn from the first frame", `Number(document.getElementById("chart-total").dataset.backfilled) >= 3 &&
		Number(document.getElementById("chart-total").dataset.points) >= 3`)
	if got := evalString(t, ctx, `render({at: new Date().toISOString(), interval_ms: 1000, admin: false, rates: false, totals: {}, series: [],
		store: {calls_per_second: 0, errors_per_second: 0, failure_modes: {}, breaker: "closed"}, leases: {acquired_per_second: 0, denied_per_second: 0, released_per_second: 0},
		config: {rules: 0, reloads_ok: 0, reloads_failed: 0}, metrics: []});
		[document.getElementById("now-allowed").textContent, document.getElementById("calls").textContent].join(" | ")`); got != "waiting for the first second | waiting for the first second" {
		t.Errorf("a frame without rates shows %q, want the waiting text for the rates and the store", got)
	}

	// The admin token shows the keys; heavy load denies mallory.
	console.setPhase("admin")
	step(t, ctx, "use the admin token",
		setValue("#token", dashAdminToken),
		click("#token-save"),
	)
	waitJS(t, ctx, "the admin view", `document.getElementById("access").textContent === "admin" &&
		document.querySelectorAll("#rules tbody tr").length === 4 &&
		document.querySelector("#rules tbody").textContent.includes("shop.yaml:")`)
	if n := evalInt(t, ctx, `document.querySelectorAll('#top-denied tr[data-key="shop|user=mallory"]').length`); n != 0 {
		t.Fatalf("mallory is in the top denied keys before any load denied it")
	}
	heavy.Store(true)
	mallory := `document.querySelector('#top-denied tr[data-key="shop|user=mallory"]')`
	waitJS(t, ctx, "mallory in the top denied keys", mallory+` !== null`)
	waitJS(t, ctx, "the chart draws denials and shadow denials", `Number(document.getElementById("chart-total").dataset.denied) > 0 &&
		Number(document.getElementById("chart-total").dataset.shadow) > 0`)
	waitJS(t, ctx, "the shadow rule's key in the top denied keys", `document.querySelector('#top-denied tr[data-key="shop|tenant=acme"]') !== null &&
		document.querySelector('#top-denied tr[data-key="shop|tenant=acme"]').textContent.includes("(shadow)")`)
	waitJS(t, ctx, "carol among the keys nearest their limits", `document.querySelector('#near-limit tr[data-key="shop|user=carol"]') !== null`)
	count := evalString(t, ctx, mallory+`.cells[2].textContent`)
	waitJS(t, ctx, "mallory's count grows", mallory+`.cells[2].textContent !== `+jsString(count))
	waitJS(t, ctx, "the rule's row shows denials", `[...document.querySelectorAll("#series tbody tr")].some(r => r.dataset.rule === "shop|user=mallory" && Number(r.cells[3].textContent) > 0)`)
	update := os.Getenv("FLOODGATE_UPDATE_SCREENSHOT") == "1"
	if update {
		// The README's picture: two minutes of history, with the load
		// changing half way.
		heavy.Store(false)
		waitJSFor(t, ctx, "a minute of light load", `Number(document.getElementById("chart-total").dataset.points) >= 60`, 90*time.Second)
		heavy.Store(true)
		waitJSFor(t, ctx, "a full chart", `Number(document.getElementById("chart-total").dataset.points) >= 115`, 90*time.Second)
	}
	under := screenshot("dashboard-under-load.png")
	if update {
		b, err := os.ReadFile(under)
		if err == nil {
			err = os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote docs/dashboard.png")
	}
	if p := console.problems("admin"); len(p) > 0 {
		t.Errorf("the page wrote to its console under load:\n%s", strings.Join(p, "\n"))
	}

	// Inspect mallory from the list: nothing remains.
	quiet()
	step(t, ctx, "inspect mallory", click(`#top-denied tr[data-key="shop|user=mallory"] button.inspect`))
	waitJS(t, ctx, "mallory's state", `document.getElementById("action-result").dataset.state === "done" &&
		document.getElementById("action-result").textContent.includes("remaining 0 of 5")`)
	malloryKey := `{"domain": "shop", "entries": [{"key": "user", "value": "mallory"}]}`
	remaining := func() string {
		t.Helper()
		code, body, _ := in.do(t, "POST", "/v1/inspect", malloryKey, dashAdminToken)
		if code != http.StatusOK {
			t.Fatalf("POST /v1/inspect: %d %s", code, body)
		}
		_, rest, _ := strings.Cut(body, `"remaining":`)
		n, _, _ := strings.Cut(rest, ",")
		return n
	}
	if r := remaining(); r != "0" {
		t.Fatalf("mallory has %s remaining before any reset, want 0", r)
	}

	// A reset with a client token is refused (403), and with none (401);
	// neither changes mallory's state.
	console.setPhase("refused")
	for _, tc := range []struct{ token, status string }{{dashClientToken, "403"}, {"", "401"}} {
		step(t, ctx, "reset with token "+tc.token,
			setValue("#token", tc.token),
			click("#token-save"),
			setValue("#f-domain", "shop"),
			setValue("#f-entries", "user=mallory"),
			evalVoid(`document.getElementById("action-result").dataset.state = ""`),
			click("#f-reset"),
		)
		waitJS(t, ctx, "the refusal "+tc.status, `document.getElementById("action-result").dataset.state === "refused" &&
			document.getElementById("action-result").textContent.includes("refused: `+tc.status+`")`)
		if r := remaining(); r != "0" {
			t.Fatalf("a refused reset gave mallory %s back", r)
		}
	}
	waitJS(t, ctx, "the feed refused without a token", `document.getElementById("status").dataset.state === "refused"`)
	screenshot("dashboard-refused.png")
	if p := console.problems("refused"); len(p) > 0 {
		t.Errorf("the page wrote to its console, beyond the 401 and 403 it was given:\n%s", strings.Join(p, "\n"))
	}

	// With the admin token, Reset (clicked twice, to confirm) gives
	// mallory the whole budget back.
	console.setPhase("reset")
	step(t, ctx, "admin again",
		setValue("#token", dashAdminToken),
		click("#token-save"),
	)
	heavy.Store(true) // mallory denied again, so surely in the list
	waitJS(t, ctx, "the admin view again", `document.getElementById("access").textContent === "admin" && `+mallory+` !== null`)
	quiet()
	reset := `#top-denied tr[data-key="shop|user=mallory"] button.reset`
	step(t, ctx, "reset mallory", click(reset))
	waitJS(t, ctx, "the reset asks to be confirmed", `document.querySelector('`+reset+`').textContent === "Confirm reset"`)
	step(t, ctx, "confirm", click(reset))
	waitJS(t, ctx, "the reset is done", `document.getElementById("action-result").dataset.state === "done" &&
		document.getElementById("action-result").textContent.includes("reset shop|user=mallory")`)
	if r := remaining(); r != "5" {
		t.Errorf("mallory has %s remaining after the reset, want 5", r)
	}
	screenshot("dashboard-reset.png")
	if p := console.problems("reset"); len(p) > 0 {
		t.Errorf("the page wrote to its console:\n%s", strings.Join(p, "\n"))
	}
	t.Logf("%d requests of load", sent.Load())
}

// browserTimeout bounds each step and each wait of the browser test.
const browserTimeout = 30 * time.Second

func runIn[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// step runs actions, failing the test on an error.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if _, err := runIn(t, ctx, chromedp.Steps(actions...)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// click clicks the element that sel selects, as the DOM's click() does:
// a mouse click at the element's place could miss it, since each frame
// of the feed redraws the tables and moves what is below them.
func click(sel string) chromedp.Action[chromedp.Void] {
	return evalVoid(`document.querySelector(` + jsString(sel) + `).click()`)
}

// setValue sets the value of the input that sel selects, as typing would
// (empty included).
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	return evalVoid(`document.querySelector(` + jsString(sel) + `).value = ` + jsString(value))
}

func evalVoid(js string) chromedp.Action[chromedp.Void] { return chromedp.Evaluate[chromedp.Void](js) }

func evalString(t *testing.T, ctx context.Context, js string) string {
	t.Helper()
	s, err := runIn(t, ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return s
}

func evalInt(t *testing.T, ctx context.Context, js string) int {
	t.Helper()
	n, err := runIn(t, ctx, chromedp.Evaluate[int](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return n
}

// waitJS evaluates js every 100 ms until it is true, for at most
// browserTimeout.
func waitJS(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	waitJSFor(t, ctx, what, js, browserTimeout)
}

// waitJSFor is waitJS for at most timeout.
func waitJSFor(t *testing.T, ctx context.Context, what, js string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		var ok bool
		if ok, err = runIn(t, ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v (last error: %v)", what, timeout, err)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`", "$", "\\$").Replace(s) + "`"
}

// TestServeDashboard: serve has the dashboard at /ui unless -ui=false,
// and an open feed does not hold up a graceful shutdown (its streams
// end when Shutdown starts: serve exits 0 at once, not after
// -shutdown-timeout with requests cut off).
func TestServeDashboard(t *testing.T) {
	off := startServe(t, "-ui=false")
	if resp, _ := off.get(t, "/ui"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("-ui=false: GET /ui is %d, want 404", resp.StatusCode)
	}

	in := startServe(t, "-shutdown-timeout", "20s")
	if resp, b := in.get(t, "/ui"); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Floodgate dashboard") {
		t.Fatalf("GET /ui: %d %.100s", resp.StatusCode, b)
	}
	// The server's address and /ui/ lead to the page; without the
	// dashboard, / is a 404 as before.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		url      string
		status   int
		location string
	}{
		{in.httpURL + "/", http.StatusFound, "/ui"},
		{in.httpURL + "/ui/", http.StatusFound, "/ui"},
		{off.httpURL + "/", http.StatusNotFound, ""},
	} {
		resp, err := noFollow.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("GET %s: %d Location %q, want %d %q", tc.url, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
	}
	resp, err := http.Get(in.httpURL + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "event: frame") {
		t.Fatalf("the feed: %q, %v", buf[:n], err)
	}
	start := time.Now()
	if code := in.stop(); code != 0 {
		t.Errorf("serve exited %d with a feed open, want 0; stderr:\n%s", code, in.stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown with a feed open took %v", d)
	}
}
