//go:build !noprofile

package graph

// profiling compiles the step timing of RunOptions.Profile in. Building
// with -tags noprofile compiles it out, to measure what it costs when off
// (BenchmarkRunProfileOff).
const profiling = true
