package rlqs

import (
	"slices"
	"strings"
	"sync"

	"github.com/floodgate-rl/floodgate/config"
)

// keyOrders is, for each domain of one config, the orders in which its
// rules nest their keys, by the set of those keys: a rule at
// tenant → path is found under "path\x00tenant" as [tenant path]. Orders
// are listed in the config's order of rules, each once.
type keyOrders map[string]map[string][][]string

// indexCache is the keyOrders of the config last seen, rebuilt when the
// server's config is swapped (a reload).
type indexCache struct {
	mu     sync.Mutex
	cfg    *config.Config
	orders keyOrders
}

func (c *indexCache) get(cfg *config.Config) keyOrders {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg != cfg {
		c.cfg, c.orders = cfg, buildOrders(cfg)
	}
	return c.orders
}

func buildOrders(cfg *config.Config) keyOrders {
	out := make(keyOrders)
	for _, d := range cfg.Domains() {
		m := make(map[string][][]string)
		for _, r := range d.Rules() {
			order := make([]string, len(r.Path))
			for i, l := range r.Path {
				order[i] = l.Key
			}
			set := setKey(slices.Clone(order))
			if !slices.ContainsFunc(m[set], func(o []string) bool { return slices.Equal(o, order) }) {
				m[set] = append(m[set], order)
			}
		}
		out[d.Name] = m
	}
	return out
}

// setKey is the sorted keys joined by NUL (which no YAML key holds... and
// if one did, two sets would only share a list of orders to try).
func setKey(keys []string) string {
	slices.Sort(keys)
	return strings.Join(keys, "\x00")
}

// match finds the rule of a bucket ID: its entries are put in the order in
// which a rule of domain nests exactly their keys, trying each such order
// in the config's order of rules, and matched as one descriptor
// (config.Domain.Match: exact value, else the longest wildcard, else
// key-only). It returns the rule and the ordered entries, or nil when no
// rule matches.
func (c *indexCache) match(cfg *config.Config, domain string, id map[string]string) (*config.Rule, []config.Entry) {
	d := cfg.Domain(domain)
	if d == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	orders := c.get(cfg)[domain][setKey(keys)]
	for _, order := range orders {
		entries := make([]config.Entry, len(order))
		for i, k := range order {
			entries[i] = config.Entry{Key: k, Value: id[k]}
		}
		if r := d.Match(entries); r != nil {
			return r, entries
		}
	}
	return nil, nil
}
