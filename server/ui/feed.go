package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// feed sends the frames of GET /ui/events to its subscribers: one frame
// per scope (admin or not: an admin's frame has the keys and the rules)
// per Options.Interval, built once and sent to every subscriber of the
// scope, so that a thousand subscribers cost one reading of the registry
// and one JSON encoding a tick, not a thousand. A subscriber too slow to
// take a frame before the next is ready loses the older one. The
// subscribers are capped in all and per peer (Options.MaxSubscribers,
// MaxSubscribersPerPeer).
type feed struct {
	d *Dashboard

	mu    sync.Mutex
	subs  map[*subscriber]struct{}
	peers map[string]int
	// scopes counts the subscribers of each scope (0: client, 1: admin).
	scopes [2]int
	// prev is the sample of the last frame, nil when no one subscribes;
	// last is the latest frame of each scope ("event: frame\ndata: …"),
	// nil when none was built since prev.
	prev *sample
	last [2][]byte
	// first is the first frame of each scope's next subscribers, with
	// the history; nil until one joins after the last tick.
	first [2][]byte
	// hist is the Totals of the last HistoryLen intervals, oldest first,
	// kept by tick whether or not anyone subscribes (one reading of the
	// registry an interval); base is the sample it last read.
	hist []Point
	base *sample

	// onLeave, if set, runs after a subscriber leaves (a test's).
	onLeave func()
}

// subscriber is one stream of the feed: frames arrive on ch, which holds
// one (an older frame not yet sent is replaced by a newer).
type subscriber struct {
	admin bool
	peer  string
	ch    chan []byte
}

func newFeed(d *Dashboard) *feed {
	return &feed{d: d, subs: map[*subscriber]struct{}{}, peers: map[string]int{}}
}

// errFull is the error of a subscriber beyond a cap.
var errFull = errors.New("ui: the feed is at its cap")

// join adds a subscriber of scope admin from peer and returns it with its
// first frame: the latest frame of its scope, or a new one (without rates)
// if none was built since the last tick. errFull when a cap is reached.
func (f *feed) join(admin bool, peer string) (*subscriber, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.d.opts
	if len(f.subs) >= o.MaxSubscribers {
		return nil, nil, fmt.Errorf("%w: %d streams, the most it serves (-ui-max-subscribers)", errFull, o.MaxSubscribers)
	}
	if f.peers[peer] >= o.MaxSubscribersPerPeer {
		return nil, nil, fmt.Errorf("%w: %d streams from this client, the most one client holds (-ui-max-subscribers-per-peer)", errFull, o.MaxSubscribersPerPeer)
	}
	scope := scopeOf(admin)
	// A first frame carries the history, and the rates since the feed's
	// last reading (none in the first interval after the start); the
	// subscribers that join within one interval share it.
	first := f.first[scope]
	if first == nil {
		cur := f.d.sample()
		since := f.base
		if since != nil && cur.at.Sub(since.at) < f.d.opts.Interval/4 {
			since = nil // too short a span for a rate: the history's last point says it
		}
		fr := f.d.frame(since, &cur, admin)
		fr.History = slices.Clone(f.hist)
		b, err := encodeFrame(fr)
		if err != nil {
			return nil, nil, err
		}
		first, f.first[scope] = b, b
		if f.prev == nil {
			f.prev = f.base
			if f.prev == nil {
				f.prev = &cur
			}
		}
	}
	s := &subscriber{admin: admin, peer: peer, ch: make(chan []byte, 1)}
	f.subs[s] = struct{}{}
	f.peers[peer]++
	f.scopes[scope]++
	return s, first, nil
}

// leave removes s; the last subscriber to leave drops the samples and
// frames kept, so that the next one starts afresh.
func (f *feed) leave(s *subscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, s)
	if f.peers[s.peer]--; f.peers[s.peer] <= 0 {
		delete(f.peers, s.peer)
	}
	f.scopes[scopeOf(s.admin)]--
	if len(f.subs) == 0 {
		f.prev, f.last = nil, [2][]byte{}
	}
	if f.onLeave != nil {
		f.onLeave()
	}
}

// tick builds the frame of each scope that has subscribers, once, and
// hands it to each of them; with none it does nothing.
func (f *feed) tick(context.Context) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.d.sample()
	if f.base != nil {
		if len(f.hist) == HistoryLen {
			f.hist = append(f.hist[:0], f.hist[1:]...)
		}
		f.hist = append(f.hist, Point{At: cur.at.UTC().Format(time.RFC3339Nano), Totals: totals(f.base, &cur)})
	}
	f.base = &cur
	f.first = [2][]byte{}
	if len(f.subs) == 0 {
		return true
	}
	f.last = [2][]byte{}
	for scope, n := range f.scopes {
		if n == 0 {
			continue
		}
		b, err := f.encode(f.prev, &cur, scope == 1)
		if err != nil {
			continue
		}
		f.last[scope] = b
	}
	f.prev = &cur
	for s := range f.subs {
		b := f.last[scopeOf(s.admin)]
		if b == nil {
			continue
		}
		select {
		case <-s.ch: // not taken yet: the newer replaces it
		default:
		}
		s.ch <- b // the only sender, under f.mu: there is room
	}
	return true
}

func (f *feed) encode(prev, cur *sample, admin bool) ([]byte, error) {
	return encodeFrame(f.d.frame(prev, cur, admin))
}

// encodeFrame is fr as a server-sent event.
func encodeFrame(fr Frame) ([]byte, error) {
	b, err := json.Marshal(fr)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len("event: frame\ndata: \n\n"))
	out = append(out, "event: frame\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...), nil
}

func scopeOf(admin bool) int {
	if admin {
		return 1
	}
	return 0
}

// maxFrames bounds ?frames=.
const maxFrames = 1_000_000

// retryFull is the Retry-After of a stream refused at a cap.
const retryFull = 10 * time.Second

// serveEvents streams frames: the latest at once (or a new one, without
// rates, when none is kept), then one per interval, until the client
// goes, the Dashboard closes, or ?frames=N have been sent (for scripts:
// ?frames=2 is one reading with rates). Each frame must be sent within
// Options.WriteTimeout, or the stream ends: a client that does not read
// holds its connection no longer.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	frames := 0
	if v := r.URL.Query().Get("frames"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxFrames {
			httpapi.WriteProblem(w, http.StatusBadRequest, "frames", fmt.Sprintf("%q is not a number of frames from 1 to %d", v, maxFrames))
			return
		}
		frames = n
	}
	rc := http.NewResponseController(w)
	s, first, err := d.feed.join(d.opts.Auth.IsAdmin(r), transport.Peer(r.RemoteAddr))
	if errors.Is(err, errFull) {
		w.Header().Set("Retry-After", strconv.Itoa(int(retryFull/time.Second)))
		httpapi.WriteProblem(w, http.StatusServiceUnavailable, "", err.Error())
		return
	}
	if err != nil {
		httpapi.WriteProblem(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	defer d.feed.leave(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold frames back
	b := first
	for sent := 0; ; {
		// The server's WriteTimeout counts from the request: each frame
		// gets a deadline of its own instead.
		if err := rc.SetWriteDeadline(time.Now().Add(d.opts.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if sent++; frames > 0 && sent >= frames {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.done:
			return
		case b = <-s.ch:
		}
	}
}
