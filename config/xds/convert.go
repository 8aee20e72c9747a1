package xds

import (
	"errors"
	"fmt"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-rl/floodgate/config"
)

// TypeURL is the type URL of upstream's RateLimitConfig resource, the one
// type Run subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// resourceTypeURL is the wrapper a server may put a resource in
// (envoy.service.discovery.v3.Resource, with its name and version).
const resourceTypeURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// decode converts the resources of one push, the whole state of the world,
// into one Config: each RateLimitConfig is one domain, read by
// config.FromSpec (so the rules and messages of a YAML file apply, each
// problem naming the resource and the field), gathered by loader.New.
// Every problem of every resource is reported at once.
func decode(resources []*anypb.Any, loader config.Loader) (*config.Config, error) {
	var (
		domains []*config.Domain
		errs    []error
	)
	for i, res := range resources {
		rc, err := unpack(res)
		if err != nil {
			errs = append(errs, fmt.Errorf("xds: resources[%d]: %w", i, err))
			continue
		}
		name := rc.GetName()
		if name == "" {
			name = fmt.Sprintf("resources[%d]", i)
		}
		d, err := config.FromSpec(name, spec(rc))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return loader.New(domains...)
}

// unpack returns the RateLimitConfig in res, bare or wrapped in a
// discovery Resource.
func unpack(res *anypb.Any) (*rlsconfv3.RateLimitConfig, error) {
	if res.GetTypeUrl() == resourceTypeURL {
		var r discoveryv3.Resource
		if err := proto.Unmarshal(res.GetValue(), &r); err != nil {
			return nil, fmt.Errorf("a Resource that does not decode: %w", err)
		}
		if r.GetResource() == nil {
			return nil, fmt.Errorf("a Resource %q without its resource", r.GetName())
		}
		res = r.GetResource()
	}
	if got := res.GetTypeUrl(); got != TypeURL {
		return nil, fmt.Errorf("a resource of type %q, want %s", cut(got, 200), TypeURL)
	}
	var rc rlsconfv3.RateLimitConfig
	if err := proto.Unmarshal(res.GetValue(), &rc); err != nil {
		return nil, fmt.Errorf("a RateLimitConfig that does not decode: %w", err)
	}
	return &rc, nil
}

// spec is rc in config's structured form: the fields upstream's loader
// reads (config_xds.go), under the names of its YAML.
func spec(rc *rlsconfv3.RateLimitConfig) config.Spec {
	return config.Spec{Domain: rc.GetDomain(), Descriptors: descriptors(rc.GetDescriptors())}
}

func descriptors(pbs []*rlsconfv3.RateLimitDescriptor) []config.DescriptorSpec {
	if len(pbs) == 0 {
		return nil
	}
	out := make([]config.DescriptorSpec, len(pbs))
	for i, d := range pbs {
		out[i] = config.DescriptorSpec{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      policy(d.GetRateLimit()),
			Descriptors:    descriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if m := d.GetMetadata(); m != nil {
			out[i].Metadata = m.AsMap()
		}
	}
	return out
}

// policy is a rate_limit block. The unit is the YAML's name of the enum
// value: UNKNOWN, the proto's default, is no unit (which only an
// unlimited rate limit may have, as upstream's loader says), and a value
// this build does not know is its number, which the parser refuses as an
// unknown unit.
func policy(p *rlsconfv3.RateLimitPolicy) *config.RateLimitSpec {
	if p == nil {
		return nil
	}
	r := &config.RateLimitSpec{
		RequestsPerUnit: p.GetRequestsPerUnit(),
		Unlimited:       p.GetUnlimited(),
		Name:            p.GetName(),
	}
	if u := p.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		r.Unit = strings.ToLower(u.String())
	}
	for _, rep := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, rep.GetName())
	}
	return r
}

// cut shortens s to about n bytes, for quoting what a server sent.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
