package server

import "github.com/floodgate-rl/floodgate/config"

// ApplyConfig swaps in cfg, a config that came from source other than
// files (source "xds": package config/xds), as the Reloader swaps in a
// reloaded file: it is checked by CheckConfig, swapped in atomically (no
// request is dropped), counted in floodgate_config_reloads_total and
// logged. A config CheckConfig refuses is counted as a failed reload and
// returned, and the old config keeps serving; logging the refusal is the
// caller's, who knows its version.
func (s *Server) ApplyConfig(cfg *config.Config, source string) error {
	if err := s.CheckConfig(cfg); err != nil {
		s.m.reloads.WithLabelValues("failure").Inc()
		return err
	}
	s.swapConfig(cfg, "source", source)
	return nil
}

// CountRejectedConfig counts a config from elsewhere than files that
// could not be read (a push over xDS that does not convert) as a failed
// reload, as the Reloader counts a file that does not parse. The old
// config keeps serving.
func (s *Server) CountRejectedConfig() {
	s.m.reloads.WithLabelValues("failure").Inc()
}

// swapConfig sets cfg and counts and logs the reload; where says where it
// came from, as log attributes.
func (s *Server) swapConfig(cfg *config.Config, where ...any) {
	s.SetConfig(cfg)
	s.m.reloads.WithLabelValues("success").Inc()
	s.m.reloadTime.SetToCurrentTime()
	s.log.Info("config loaded", append(where, "domains", len(cfg.Domains()), "rules", countRules(cfg))...)
}
