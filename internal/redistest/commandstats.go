package redistest

import (
	"strconv"
	"strings"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls       int64 // calls=, failed calls included
	Usec        int64 // usec=, the time spent in them
	FailedCalls int64 // failed_calls=, those that answered an error
}

// ParseCommandStats reads the output of INFO commandstats into each
// command's stats, by its name in lower case ("evalsha"); a command not
// listed has not run.
func ParseCommandStats(info string) map[string]CommandStat {
	out := make(map[string]CommandStat)
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		var st CommandStat
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			case "failed_calls":
				st.FailedCalls = n
			}
		}
		out[cmd] = st
	}
	return out
}

// ScriptCommands are the commands that run a script: EVALSHA, EVAL and
// FCALL. The commands a script runs inside are counted under their own
// names.
var ScriptCommands = []string{"evalsha", "eval", "fcall"}
