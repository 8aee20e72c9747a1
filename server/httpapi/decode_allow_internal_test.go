package httpapi

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// compareAllowDecode decodes body as POST /v1/allow now does
// (decodeAllowJSON: decodeAllow, encoding/json when it declines) and as
// it did before (decodeJSON: encoding/json only), and fails unless the
// two agree on everything the caller sees: success, the value, and for
// a failure the status, the header and every byte of the problem. It
// reports whether decodeAllow itself took the body.
func compareAllowDecode(t *testing.T, body []byte) (fast bool) {
	t.Helper()
	var got, want AllowRequest
	grec, wrec := httptest.NewRecorder(), httptest.NewRecorder()
	gok := decodeAllowJSON(grec, httptest.NewRequest(http.MethodPost, "/v1/allow", bytes.NewReader(body)), &got)
	wok := decodeJSON(wrec, httptest.NewRequest(http.MethodPost, "/v1/allow", bytes.NewReader(body)), &want)
	if gok != wok {
		t.Fatalf("body %.300q: decoded %v, encoding/json %v (%s)", body, gok, wok, wrec.Body)
	}
	if grec.Code != wrec.Code || !reflect.DeepEqual(grec.Header(), wrec.Header()) || !bytes.Equal(grec.Body.Bytes(), wrec.Body.Bytes()) {
		t.Fatalf("body %.300q: answered %d %v %q, encoding/json %d %v %q", body, grec.Code, grec.Header(), grec.Body, wrec.Code, wrec.Header(), wrec.Body)
	}
	if gok && !reflect.DeepEqual(got, want) {
		t.Fatalf("body %.300q: %s, encoding/json %s", body, dumpAllow(&got), dumpAllow(&want))
	}
	if len(body) > MaxBodyBytes {
		return false // readBody refuses it before decodeAllow
	}
	var fresh AllowRequest
	fast = decodeAllow(body, &fresh)
	if fast && !wok {
		t.Fatalf("body %.300q: decodeAllow took a body encoding/json refuses (%s)", body, wrec.Body)
	}
	return fast
}

// dumpAllow shows a request with what its pointers point to.
func dumpAllow(r *AllowRequest) string {
	p := func(n *int64) string {
		if n == nil {
			return "nil"
		}
		return strconv.FormatInt(*n, 10)
	}
	l := func(l *LimitJSON) string {
		if l == nil {
			return "nil"
		}
		return fmt.Sprintf("%+v(limit %s)", *l, p(l.Limit))
	}
	s := fmt.Sprintf("{key %q limit %s cost %s domain %q hits %s priority %q max_wait_ms %s descriptors(nil=%v)",
		r.Key, l(r.Limit), p(r.Cost), r.Domain, p(r.Hits), r.Priority, p(r.MaxWaitMS), r.Descriptors == nil)
	for _, d := range r.Descriptors {
		s += fmt.Sprintf(" [entries(nil=%v) %+v hits %s limit %s]", d.Entries == nil, d.Entries, p(d.Hits), l(d.Limit))
	}
	return s + "}"
}

// genAllow writes bodies of POST /v1/allow: mostly of the plain shapes
// decodeAllow takes, with every kind of departure from them that
// encoding/json treats in its own way (a name in another case, a name
// twice, unknown names, null, escapes, control bytes, invalid UTF-8,
// numbers with fractions, exponents, leading zeros or too many digits,
// wrong types, trailing data, truncation).
type genAllow struct {
	r *rand.Rand
	b []byte
	// scale divides the odds of every departure: 1, or large for a
	// body that is almost certainly plain.
	scale int
}

// odd reports a departure of odds 1 in n (times scale).
func (g *genAllow) odd(n int) bool { return g.r.IntN(n*g.scale) == 0 }

func (g *genAllow) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *genAllow) ws() {
	switch {
	case g.odd(100):
		g.b = append(g.b, g.pick("\f", "\u00a0", "\v", "\x00")...)
	case g.r.IntN(4) == 0:
		g.b = append(g.b, g.pick(" ", "\n", "\t", "\r\n  ")...)
	}
}

func (g *genAllow) str() {
	switch g.r.IntN(12 * g.scale) {
	case 0:
		g.b = append(g.b, g.pick(`"a\"b"`, `"\u0041"`, `"\ud800"`, `"\ud83d\ude00"`, `"a\\b"`, `"\n"`, `"\/"`)...)
	case 1:
		g.b = append(g.b, '"', byte(g.r.IntN(0x20)), '"')
	case 2:
		g.b = append(g.b, g.pick(`"é"`, `"日本"`, "\"\u2028<>&\"", "\"\xff\"", "\"\xe2\x82\"", "\"a\x7f\"")...)
	case 3:
		g.b = append(g.b, g.pick("null", "1", "true", "{}", "[]", `""`)...)
	default:
		g.b = append(g.b, '"')
		for range g.r.IntN(8) {
			g.b = append(g.b, "abcxyzAZ09:_-./ "[g.r.IntN(16)])
		}
		g.b = append(g.b, '"')
	}
}

func (g *genAllow) num() {
	switch g.r.IntN(10 * g.scale) {
	case 0:
		g.b = append(g.b, g.pick("-0", "01", "-01", "1.0", "1e3", "1E3", "-", "+1", "0.5", "1.", "--1", "0x10", "00")...)
	case 1:
		g.b = append(g.b, g.pick("999999999999999999", "-999999999999999999", "1000000000000000000", "9223372036854775807",
			"-9223372036854775808", "9223372036854775808", "99999999999999999999")...)
	case 2:
		g.b = append(g.b, g.pick("null", `"1"`, "true", "[]", "{}")...)
	default:
		if g.r.IntN(5) == 0 {
			g.b = append(g.b, '-')
		}
		g.b = strconv.AppendInt(g.b, g.r.Int64N(1<<uint(g.r.IntN(62)+1)), 10)
	}
}

func (g *genAllow) boolean() {
	if g.odd(8) {
		g.b = append(g.b, g.pick("null", "1", `"true"`, "tru", "True", "falsey")...)
		return
	}
	g.b = append(g.b, g.pick("true", "false")...)
}

// field is a member of an object: name (or a departure from it), then
// its value.
type field struct {
	name  string
	value func()
}

// object writes some of fs, in some order, sometimes one twice, one in
// another case, or one unknown.
func (g *genAllow) object(fs []field) {
	if g.odd(30) {
		g.b = append(g.b, g.pick("null", "[]", `"x"`, "1")...)
		return
	}
	g.b = append(g.b, '{')
	g.ws()
	n := 0
	for _, i := range g.r.Perm(len(fs)) {
		if g.r.IntN(3) == 0 {
			continue
		}
		f := fs[i]
		if n > 0 {
			g.b = append(g.b, ',')
			g.ws()
		}
		n++
		name := f.name
		switch g.r.IntN(40 * g.scale) {
		case 0:
			name = strings.ToUpper(name)
		case 1:
			name = "unknown"
		case 2:
			name = strings.Replace(name, string(name[0]), `\u00`+strconv.FormatInt(int64(name[0]), 16), 1)
		case 3:
			name = strings.Replace(name, "k", "\u212a", 1) // the Kelvin sign, which encoding/json folds to k
		}
		g.b = append(g.b, '"')
		g.b = append(g.b, name...)
		g.b = append(g.b, '"')
		g.ws()
		g.b = append(g.b, ':')
		g.ws()
		f.value()
		g.ws()
		if g.odd(10) {
			// The same name again.
			g.b = append(g.b, `,"`+f.name+`":`...)
			f.value()
		}
	}
	if n > 0 && g.odd(40) {
		g.b = append(g.b, ',')
	}
	g.b = append(g.b, '}')
}

func (g *genAllow) array(elem func()) {
	if g.odd(30) {
		g.b = append(g.b, g.pick("null", "{}", `"x"`)...)
		return
	}
	g.b = append(g.b, '[')
	g.ws()
	for i := range g.r.IntN(4) {
		if i > 0 {
			g.b = append(g.b, ',')
			g.ws()
		}
		elem()
		g.ws()
	}
	if g.odd(40) {
		g.b = append(g.b, g.pick(",", ",null", ",1")...)
	}
	g.b = append(g.b, ']')
}

func (g *genAllow) limit() {
	g.object([]field{
		{"algorithm", g.str}, {"limit", g.num}, {"period", g.str}, {"unit", g.str}, {"time_zone", g.str},
		{"anchor", g.str}, {"burst", g.num}, {"window", g.str}, {"count_rejected", g.boolean}, {"name", g.str},
	})
}

func (g *genAllow) descriptor() {
	g.object([]field{
		{"entries", func() {
			g.array(func() { g.object([]field{{"key", g.str}, {"value", g.str}}) })
		}},
		{"hits", g.num}, {"limit", g.limit},
	})
}

func (g *genAllow) body() []byte {
	g.b = g.b[:0]
	g.scale = 1
	if g.r.IntN(2) == 0 {
		g.scale = 1000
	}
	g.ws()
	g.object([]field{
		{"key", g.str}, {"limit", g.limit}, {"cost", g.num}, {"domain", g.str},
		{"descriptors", func() { g.array(g.descriptor) }}, {"hits", g.num}, {"priority", g.str}, {"max_wait_ms", g.num},
	})
	g.ws()
	switch g.r.IntN(30 * g.scale) {
	case 0:
		g.b = append(g.b, g.pick("x", "{}", " {}", "]", "}", "null")...)
	case 1:
		g.b = g.b[:g.r.IntN(len(g.b)+1)]
	case 2:
		if len(g.b) > 0 {
			i := g.r.IntN(len(g.b))
			g.b = append(g.b[:i], g.b[i+1:]...)
		}
	}
	return g.b
}

// TestDecodeAllowMatchesEncodingJSON compares POST /v1/allow's decoding
// with encoding/json's on generated bodies (compareAllowDecode), and
// checks that decodeAllow takes most plain bodies itself: a decoder that
// declined everything would agree with encoding/json too.
func TestDecodeAllowMatchesEncodingJSON(t *testing.T) {
	g := &genAllow{r: rand.New(rand.NewPCG(1, 2))}
	n, fast := 20000, 0
	if testing.Short() {
		n = 2000
	}
	// Departures whose value encoding/json makes in its own way.
	for _, body := range []string{
		`{"key":"k","limit":{"limit":1,"period":"1s"},"limit":{"limit":2}}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"}],"hits":3}],"descriptors":[{"entries":[{"key":"b"}]}]}`,
		`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"1"},{"key":"a","value":"2"}]}],"descriptors":[{"entries":[{"value":"3"}]}]}`,
		`{"domain":"d","Domain":"e"}`, `{"DOMAIN":"e"}`, `{"\u212aey":"k"}`, `{"domain":"d","domain":"e"}`,
		`{"key":"k","cost":1.0}`, `{"key":"k","cost":1e2}`, `{"key":"k","cost":-0}`, `{"key":"k","cost":01}`,
		`{"key":"k","cost":null}`, `{"key":null}`, `{"key":"k","limit":null}`, `{"domain":"d","descriptors":null}`,
		`{"domain":"d","descriptors":[null]}`, `{"key":"a\u0000b"}`, `{"key":"\ud800"}`, "{\"key\":\"a\xffb\"}",
		`{"key":"k","cost":9223372036854775807}`, `{"key":"k","cost":9223372036854775808}`, `{"key":"k"} {}`, `{"key":"k"}]`,
	} {
		compareAllowDecode(t, []byte(body))
	}
	for range n {
		if compareAllowDecode(t, g.body()) {
			fast++
		}
	}
	if fast < n/4 {
		t.Errorf("decodeAllow took %d of %d generated bodies, want at least a quarter", fast, n)
	}
	t.Logf("decodeAllow took %d of %d generated bodies", fast, n)
}

// TestDecodeAllowTakes lists bodies decodeAllow must take itself: the
// plain forms clients send (benchall's among them).
func TestDecodeAllowTakes(t *testing.T) {
	for _, body := range []string{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"42"}]}]}` + "\n",
		`{"key": "user:42", "limit": {"algorithm": "fixed_window", "limit": 60, "period": "1m"}, "cost": 1}`,
		`{"key":"k","limit":{"algorithm":"gcra","limit":10,"period":"1s","burst":20,"count_rejected":true,"name":"n","window":"aligned"},"max_wait_ms":0,"priority":"critical"}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "plan", "value": "free"}]}, {"entries": [{"key": "user", "value": "é日本"}], "hits": 2, "limit": {"limit": 5, "unit": "month", "time_zone": "UTC", "anchor": "15"}}], "hits": -3}`,
		`{"domain":"api","descriptors":[]}`,
		` {"domain":"api","descriptors":[{"entries":[]}]} `,
		`{}`,
	} {
		if !compareAllowDecode(t, []byte(body)) {
			t.Errorf("decodeAllow declined %q", body)
		}
	}
}

// TestDecodeAllowBounds: bodies at and over MaxBodyBytes are read as
// http.MaxBytesReader read them (compareAllowDecode), and a body over the
// bound still closes the connection, as MaxBytesReader has the server do.
func TestDecodeAllowBounds(t *testing.T) {
	for _, size := range []int{MaxBodyBytes - 1, MaxBodyBytes, MaxBodyBytes + 1, MaxBodyBytes + 4096} {
		body := []byte(`{"domain":"d",` + strings.Repeat(" ", size-len(`{"domain":"d",`)-len(`"descriptors":[]}`)) + `"descriptors":[]}`)
		if len(body) != size {
			t.Fatalf("body of %d bytes, want %d", len(body), size)
		}
		compareAllowDecode(t, body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req AllowRequest
		if decodeAllowJSON(w, r, &req) {
			io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"key":"`+strings.Repeat("x", MaxBodyBytes)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Errorf("status %d, connection closed %v; want 413 and closed", resp.StatusCode, resp.Close)
	}
}

// FuzzDecodeAllow: for any body, POST /v1/allow's decoding agrees with
// encoding/json's (compareAllowDecode).
func FuzzDecodeAllow(f *testing.F) {
	g := &genAllow{r: rand.New(rand.NewPCG(3, 4))}
	for range 40 {
		f.Add(string(g.body()))
	}
	f.Add(`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"42"}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		compareAllowDecode(t, []byte(body))
	})
}

// TestPeriodString: periodString is Duration.String.
func TestPeriodString(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, time.Second, time.Minute, time.Hour, 24 * time.Hour, 90 * time.Second, -time.Second, 7 * 24 * time.Hour} {
		if got, want := periodString(d), d.String(); got != want {
			t.Errorf("periodString(%d) = %q, want %q", d, got, want)
		}
	}
}
