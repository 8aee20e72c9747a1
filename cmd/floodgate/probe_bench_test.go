package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkProbe measures, from outside a `floodgate serve` process on
// loopback, what the probes of issue 25 cost it: its goroutines and RSS
// before and under each probe, and what the probe did to its other
// clients. It builds the binary of this directory, so that the same file
// measures another checkout (the code before a change) too; extra serve
// flags come from FLOODGATE_PROBE_ARGS (space-separated). Run it once:
//
//	go test -run '^$' -bench BenchmarkProbe -benchtime 1x ./cmd/floodgate
//
// Probes (each bounded, each stopped at its end):
//
//	streams       one connection opens 20,000 gRPC calls without a token
//	              and sends no message (token files set)
//	streams-auth  the same with a client token
//	slow-readers  a peer opens 200 connections (-max-connections 200),
//	              each asking for 200 copies of /openapi.yaml and
//	              reading nothing; then /healthz from another peer
//	sse           2,000 subscribers of /ui/events; then 200 decisions
func BenchmarkProbe(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "floodgate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	extra := strings.Fields(os.Getenv("FLOODGATE_PROBE_ARGS"))
	tokens := filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(clientToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("probe=streams", func(b *testing.B) {
		p := startProbeServe(b, bin, append([]string{"-auth-token-file", tokens}, extra...)...)
		p.measure(b, func() { streamFlood(b, p.grpcAddr, "", 20_000) })
	})
	b.Run("probe=streams-auth", func(b *testing.B) {
		p := startProbeServe(b, bin, append([]string{"-auth-token-file", tokens}, extra...)...)
		p.measure(b, func() { streamFlood(b, p.grpcAddr, clientToken, 20_000) })
	})
	b.Run("probe=slow-readers", func(b *testing.B) {
		p := startProbeServe(b, bin, append([]string{"-max-connections", "200"}, extra...)...)
		p.measure(b, func() {
			requests := strings.Repeat("GET /openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200)
			for range 200 {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Control: rcvbufControl(4096)}
				c, err := d.Dial("tcp", p.httpAddr)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				c.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(c, requests)
			}
			began := time.Now()
			client := &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Get("http://" + p.httpAddr + "/healthz")
			if err == nil {
				resp.Body.Close()
				b.ReportMetric(float64(time.Since(began).Milliseconds()), "healthz-ms")
			} else {
				b.ReportMetric(-1, "healthz-ms")
				b.Logf("/healthz: %v", err)
			}
		})
	})
	b.Run("probe=sse", func(b *testing.B) {
		p := startProbeServe(b, bin, extra...)
		before := p.decisions(b, 200)
		p.measure(b, func() {
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			var started sync.WaitGroup
			tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 2000}
			refused := 0
			var mu sync.Mutex
			for range 2000 {
				started.Add(1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.httpAddr+"/ui/events", nil)
					resp, err := tr.RoundTrip(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						mu.Lock()
						refused++
						mu.Unlock()
						started.Done()
						if err == nil {
							resp.Body.Close()
						}
						return
					}
					defer resp.Body.Close()
					r := bufio.NewReader(resp.Body)
					r.ReadString('\n')
					started.Done()
					io.Copy(io.Discard, r)
				}()
			}
			started.Wait()
			b.ReportMetric(float64(refused), "refused")
			under := p.decisions(b, 200)
			b.ReportMetric(before[0], "decide-p50-ms-before")
			b.ReportMetric(under[0], "decide-p50-ms")
			b.ReportMetric(under[1], "decide-p99-ms")
		})
	})
}

// probeServe is a floodgate serve process of a probe.
type probeServe struct {
	pid                           int
	httpAddr, grpcAddr, debugAddr string
}

func startProbeServe(b *testing.B, bin string, args ...string) *probeServe {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	debug := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-debug-addr", debug, "-log-level", "error"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	m := servingLine.FindStringSubmatch(line)
	if m == nil {
		b.Fatalf("serve: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return &probeServe{pid: cmd.Process.Pid, httpAddr: m[1], grpcAddr: m[2], debugAddr: debug}
}

var goroutineTotal = regexp.MustCompile(`goroutine profile: total (\d+)`)

// state is the process's goroutines and RSS in MiB.
func (p *probeServe) state(b *testing.B) (goroutines, rssMiB float64) {
	b.Helper()
	resp, err := http.Get("http://" + p.debugAddr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	resp.Body.Close()
	if m := goroutineTotal.FindSubmatch(body); m != nil {
		goroutines, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err == nil {
		for line := range strings.Lines(string(st)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rssMiB = kb / 1024
			}
		}
	}
	return goroutines, rssMiB
}

// measure reports the goroutines and RSS before and after probe.
func (p *probeServe) measure(b *testing.B, probe func()) {
	g0, r0 := p.state(b)
	for b.Loop() {
		probe()
	}
	g1, r1 := p.state(b)
	b.ReportMetric(g0, "goroutines-before")
	b.ReportMetric(g1, "goroutines")
	b.ReportMetric(r0, "rss-MiB-before")
	b.ReportMetric(r1, "rss-MiB")
}

// decisions times n decisions one after another and returns their p50
// and p99 in milliseconds.
func (p *probeServe) decisions(b *testing.B, n int) [2]float64 {
	var ms []float64
	for i := range n {
		began := time.Now()
		resp, err := http.Post("http://"+p.httpAddr+"/v1/allow", "application/json",
			strings.NewReader(fmt.Sprintf(`{"key": "k%d", "limit": {"limit": 10, "period": "1m"}}`, i)))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ms = append(ms, float64(time.Since(began).Microseconds())/1000)
	}
	slices.Sort(ms)
	return [2]float64{ms[n/2], ms[n*99/100]}
}

// streamFlood opens n gRPC calls on one connection, with token unless
// empty, and sends no message; it returns once the server has read them
// all (a PING sent after them is answered), leaving them open.
func streamFlood(b *testing.B, addr, token string, n int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var wmu sync.Mutex
	fr := http2.NewFramer(c, c)
	io.WriteString(c, http2.ClientPreface)
	fr.WriteSettings()
	pong := make(chan struct{})
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					wmu.Lock()
					fr.WriteSettingsAck()
					wmu.Unlock()
				}
			case *http2.PingFrame:
				if f.IsAck() {
					close(pong)
				}
			}
		}
	}()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for i := range n {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
			{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if token != "" {
			enc.WriteField(hpack.HeaderField{Name: "authorization", Value: "Bearer " + token})
		}
		wmu.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hbuf.Bytes(), EndHeaders: true})
		wmu.Unlock()
		if err != nil {
			b.Logf("stream %d: %v", i, err)
			return
		}
	}
	wmu.Lock()
	fr.WritePing(false, [8]byte{1})
	wmu.Unlock()
	select {
	case <-pong:
	case <-time.After(60 * time.Second):
		b.Log("no PING answer within 60 s")
	}
}
