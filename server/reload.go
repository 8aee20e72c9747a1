package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/fsnotify/fsnotify"
)

// Reloader loads config files into a Server: once at start, again whenever
// a file changes (watched with fsnotify; editors and Kubernetes ConfigMap
// updates replace files, so the directories are watched, not the files),
// and whenever Reload is called (on SIGHUP). A valid config swaps in
// atomically and no request is dropped; an invalid one is rejected, logged
// once, counted in floodgate_config_reloads_total{result="failure"}, and the
// old config keeps serving.
type Reloader struct {
	srv      *Server
	paths    []string
	debounce time.Duration
	watching chan struct{} // closed once Watch has its watch in place
	watchOne sync.Once

	mu      sync.Mutex // serializes loads
	lastErr string
	loaded  string // the fingerprint of the files when last loaded
}

// NewReloader loads paths (files or directories, as config.Load) into srv
// and returns the Reloader that keeps them loaded. The first load must
// succeed.
func NewReloader(srv *Server, paths ...string) (*Reloader, error) {
	if len(paths) == 0 {
		return nil, errors.New("server: NewReloader: no config path")
	}
	r := &Reloader{srv: srv, paths: paths, debounce: 100 * time.Millisecond, watching: make(chan struct{})}
	r.loaded = fingerprint(paths)
	cfg, err := srv.loader.Load(paths...)
	if err == nil {
		err = srv.CheckConfig(cfg)
	}
	if err != nil {
		srv.m.reloads.WithLabelValues("failure").Inc()
		return nil, err
	}
	r.swap(cfg)
	return r, nil
}

// Reload loads the config files again and swaps them in if they are valid.
// It returns the problems of an invalid config, which then is not used.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loaded = fingerprint(r.paths)
	cfg, err := r.srv.loader.Load(r.paths...)
	if err == nil {
		err = r.srv.CheckConfig(cfg)
	}
	if err != nil {
		r.srv.m.reloads.WithLabelValues("failure").Inc()
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.srv.log.Error("config rejected, keeping the previous one", "paths", r.paths, "error", err)
		}
		return err
	}
	r.lastErr = ""
	r.swap(cfg)
	return nil
}

func (r *Reloader) swap(cfg *config.Config) {
	r.srv.swapConfig(cfg, "paths", r.paths)
}

// Watch reloads on every change under the config paths until ctx ends. A
// burst of events (an editor's write, rename and chmod) causes one reload,
// after the events have been quiet for a short debounce. Watching closes
// once the watch is in place; a change made before that, even one made
// between NewReloader and Watch, is found then by comparing the files'
// names, sizes and modification times with those of the last load, so no
// change is missed however late the watch starts.
//
// The watch survives the directory itself being replaced: the parent of
// each watched directory is watched too, and when the directory comes
// back (removed and made again, or renamed into place) its watch is made
// again and the config reloaded. A Kubernetes ConfigMap update, which
// swaps the ..data symbolic link inside the directory, is an event of
// the directory itself.
func (r *Reloader) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	dirs := map[string]bool{}
	for _, p := range r.paths {
		dir := p
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		if !dirs[dir] {
			dirs[dir] = true
			if err := w.Add(dir); err != nil {
				return err
			}
		}
	}
	// The parents, to see a watched directory go and come back. A parent
	// that cannot be watched (not readable) only costs that.
	parents := map[string]bool{}
	for dir := range dirs {
		if parent := filepath.Dir(dir); parent != dir && !dirs[parent] && !parents[parent] {
			parents[parent] = w.Add(parent) == nil
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	r.mu.Lock()
	changed := fingerprint(r.paths) != r.loaded
	r.mu.Unlock()
	if changed {
		timer.Reset(0)
	}
	r.watchOne.Do(func() { close(r.watching) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if parents[filepath.Dir(ev.Name)] && !dirs[ev.Name] && !r.isPath(ev.Name) {
				continue // a sibling of a watched directory
			}
			if dirs[ev.Name] && ev.Has(fsnotify.Create) {
				// The directory came back: watch it again.
				if err := w.Add(ev.Name); err != nil {
					r.srv.log.Warn("config watch error", "error", err)
				}
			}
			timer.Reset(r.debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.srv.log.Warn("config watch error", "error", err)
		case <-timer.C:
			_ = r.Reload()
		}
	}
}

// isPath reports whether name is one of the config paths.
func (r *Reloader) isPath(name string) bool {
	for _, p := range r.paths {
		if filepath.Clean(p) == filepath.Clean(name) {
			return true
		}
	}
	return false
}

// Watching returns a channel that is closed once Watch watches the config
// paths: from then on, every change is reloaded.
func (r *Reloader) Watching() <-chan struct{} { return r.watching }

// fingerprint describes the files config.Load reads from paths (every
// entry of a directory, which is a superset) by name, size and
// modification time, following symbolic links as Load does. A file that
// cannot be read shows as such, so its repair counts as a change.
func fingerprint(paths []string) string {
	var b strings.Builder
	entry := func(name string) {
		fi, err := os.Stat(name)
		if err != nil {
			fmt.Fprintf(&b, "%s:!\n", name)
			return
		}
		fmt.Fprintf(&b, "%s:%d:%d\n", name, fi.Size(), fi.ModTime().UnixNano())
	}
	for _, p := range paths {
		entry(p)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			names, _ := os.ReadDir(p)
			for _, e := range names {
				entry(filepath.Join(p, e.Name()))
			}
		}
	}
	return b.String()
}
