package algorithm

// Machine, NewMachine and CheckStep lend the internal test helpers to the
// fuzz target in package algorithm_test, which can import floodgate (and so
// fuzz through floodgate.Limit) where package algorithm cannot.
type Machine = machine

// NewMachine is the zero state of the algorithm named as in floodgate.
func NewMachine(name string) Machine {
	switch name {
	case "fixed_window":
		return &fixedM{}
	case "sliding_window_log":
		return &logM{}
	case "sliding_window":
		return &slidingM{}
	case "token_bucket":
		return &bucketM{}
	case "gcra":
		return &gcraM{}
	case "concurrency":
		return &concM{}
	}
	return nil
}

var CheckStep = checkStep

// StepMachine applies one request to m.
func StepMachine(m Machine, p Params, now, cost int64, id string, op LeaseOp) Decision {
	return m.step(p, now, cost, id, op)
}

// CloneMachine is an independent copy of m.
func CloneMachine(m Machine) Machine { return m.clone() }
