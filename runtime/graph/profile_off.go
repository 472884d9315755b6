//go:build noprofile

package graph

// profiling is off: RunOptions.Profile is ignored (see profile_on.go).
const profiling = false
