package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// The examples send requests through an httptest.ResponseRecorder with a
// fake clock; a real server is http.ListenAndServe(addr, mw.Handler(mux)).
func send(h http.Handler, remoteAddr string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remoteAddr
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

// Limit every client address to 3 requests per minute.
func Example() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Limit: 3, Period: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hello)

	for range 4 {
		w := send(h, "192.0.2.1:4000")
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	fmt.Print(send(h, "192.0.2.1:4000").Body)
	// Output:
	// 200 RateLimit: "default";r=2;t=60 Retry-After: ""
	// 200 RateLimit: "default";r=1;t=60 Retry-After: ""
	// 200 RateLimit: "default";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "default";r=0;t=60 Retry-After: "60"
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Retry after 60 seconds.","violated-policies":["default"]}
}

// Behind a reverse proxy, trust it to say who the client is. A client that
// sends its own X-Forwarded-For only adds to the left of what the proxy
// writes, and cannot choose its key.
func ExampleClientIP() {
	key := httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}.Key

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.7:3456"                                // the proxy
	r.Header.Set("X-Forwarded-For", "198.51.100.99, 203.0.113.5") // a spoof, then what the proxy saw
	fmt.Println(key(r))

	r.RemoteAddr = "203.0.113.5:3456" // no proxy: the header is not believed
	fmt.Println(key(r))

	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:443" // IPv6: grouped by /64
	fmt.Println(key(r))
	// Output:
	// ip:203.0.113.5
	// ip:203.0.113.5
	// ip:2001:db8:1:2::/64
}

// Limit by API key, 10 per second and 1000 per hour together: a request
// denied by one limit takes nothing from the other. The key is stored
// hashed. A request without a key is refused, as by default.
func ExampleHeader() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, _ := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits: []floodgate.Limit{
			{Name: "second", Limit: 10, Period: time.Second},
			{Name: "hour", Limit: 1000, Period: time.Hour},
		},
		Key: httplimit.Header("X-Api-Key"),
	})
	h := mw.Handler(hello)

	w := send(h, "192.0.2.1:4000", "X-Api-Key", "sk_live_123")
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Code, w.Header().Get("RateLimit"))
	fmt.Println(send(h, "192.0.2.1:4000").Code)
	// Output:
	// 200 "second";q=10;w=1, "hour";q=1000;w=3600
	// 200 "second";r=9;t=1, "hour";r=999;t=3600
	// 400
}

type userKey struct{}

// Limit by the authenticated user, which an earlier middleware put in the
// request's context; anonymous requests share one small budget.
func ExampleKeyFunc() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, _ := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Limit: 1, Period: time.Minute}},
		Key: func(r *http.Request) string {
			if user, ok := r.Context().Value(userKey{}).(string); ok {
				return "user:" + user
			}
			return ""
		},
		MissingKey: httplimit.SharedMissingKey,
	})
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" { // a real one checks a token
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	}
	h := auth(mw.Handler(hello))

	fmt.Println(send(h, "192.0.2.1:1", "X-User", "alice").Code)
	fmt.Println(send(h, "192.0.2.1:1", "X-User", "bob").Code)
	fmt.Println(send(h, "192.0.2.1:1").Code, send(h, "192.0.2.2:1").Code)
	// Output:
	// 200
	// 200
	// 200 429
}

// DryRun tries a limit out on live traffic: it decides and reports but
// never denies.
func ExampleConfig_dryRun() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, _ := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Limit: 1, Period: time.Minute}},
		DryRun:  true,
		Report: func(r *http.Request, res httplimit.Result) {
			if res.DryRun {
				fmt.Println("would deny", res.Key)
			}
		},
	})
	h := mw.Handler(hello)
	fmt.Println(send(h, "192.0.2.1:1").Code)
	fmt.Println(send(h, "192.0.2.1:1").Code)
	// Output:
	// 200
	// would deny ip:192.0.2.1
	// 200
}

// A custom deny handler can add to the default answer, or replace it.
func ExampleDenyFunc() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, _ := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Limit: 0, Period: time.Minute}},
		Headers: &ratelimitheader.Options{Legacy: true},
		Deny: func(w http.ResponseWriter, r *http.Request, res httplimit.Result) {
			w.Header().Set("X-Denied-By", "floodgate")
			httplimit.WriteDenied(w, r, res)
		},
	})
	w := send(mw.Handler(hello), "192.0.2.1:1")
	fmt.Println(w.Code, w.Header().Get("X-Denied-By"), w.Header().Get("X-RateLimit-Remaining"))
	// Output: 429 floodgate 0
}

// The handler behind the middleware reads the decision from the context.
func ExampleFromContext() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, _ := httplimit.New(httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 5, Period: time.Minute}}})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		fmt.Fprintf(w, "%d requests left this minute\n", res.Decision.Remaining)
	}))
	fmt.Print(send(h, "192.0.2.1:1").Body)
	// Output: 4 requests left this minute
}

// Wait for a slot instead of refusing: 20 requests a second for one
// crawler, and a request that finds none free waits up to 100 ms for the
// next. The clock is frozen, so each slot is exactly 50 ms after the
// one before; the middleware really sleeps until it.
func ExampleConfig_maxWait() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 20, Period: time.Second, Burst: 1}},
		Key:     func(*http.Request) string { return "crawler" },
		MaxWait: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		fmt.Fprintf(w, "waited %v", res.Waited)
	}))
	for range 4 {
		w := send(h, "192.0.2.1:4000")
		if w.Code != http.StatusOK {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
			continue
		}
		fmt.Println(w.Code, w.Body)
	}
	// Output:
	// 200 waited 0s
	// 200 waited 50ms
	// 200 waited 100ms
	// 429 Retry-After: 1
}

// Keep the last part of a budget for the requests that matter: a
// request's class comes from a header set by the proxy in front, and
// sheddable requests stop at 8 of 10 per minute, leaving 2 for critical
// ones.
func ExampleConfig_priority() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}},
		Key:     func(*http.Request) string { return "upstream" },
		Priority: func(r *http.Request) floodgate.Priority {
			if r.Header.Get("X-Priority") == "critical" {
				return floodgate.Critical
			}
			return floodgate.Sheddable
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hello)
	count := func(header ...string) (n int) {
		for range 20 {
			if send(h, "192.0.2.1:4000", header...).Code != http.StatusOK {
				return n
			}
			n++
		}
		return n
	}
	fmt.Println("sheddable:", count())
	fmt.Println("critical:", count("X-Priority", "critical"))
	// Output:
	// sheddable: 8
	// critical: 2
}
