package main

import (
	"flag"

	"github.com/floodgate-rl/floodgate/config"
)

// parityFlags are the settings of envoyproxy/ratelimit that change a
// decision or an answer, as serve's flags (env FLOODGATE_ and the flag's
// name), each off by default as upstream's.
type parityFlags struct {
	quotaMode       bool // QUOTA_MODE
	dynamicMetadata bool // RESPONSE_DYNAMIC_METADATA
	mergeDomains    bool // MERGE_DOMAIN_CONFIG
}

func (p *parityFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.quotaMode, "quota-mode", false, "global quota mode, as envoyproxy/ratelimit's QUOTA_MODE: every descriptor (but those of unlimited rules) is a quota, which keeps its OVER_LIMIT status but denies the request only when every quota of the request is over; a rule's quota_mode does the same for that rule (env FLOODGATE_QUOTA_MODE)")
	fs.BoolVar(&p.dynamicMetadata, "response-dynamic-metadata", false, "fill the dynamic_metadata of Envoy's answers (and POST /json's) as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: the domain, the descriptors, the hits and the merged metadata of the rules the request passed (env FLOODGATE_RESPONSE_DYNAMIC_METADATA)")
	mergeFlag(fs, &p.mergeDomains)
}

// mergeFlag is -merge-domain-config, of serve and of config validate.
func mergeFlag(fs *flag.FlagSet, merge *bool) {
	fs.BoolVar(merge, "merge-domain-config", false, "merge the config files that define one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: a later file's top-level descriptors join the domain's, one already there is an error; by default a domain defined twice is an error (env FLOODGATE_MERGE_DOMAIN_CONFIG)")
}

// loader is how serve loads its config files.
func (p parityFlags) loader() config.Loader {
	return config.Loader{MergeDomains: p.mergeDomains}
}
