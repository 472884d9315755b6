package graph

import (
	"time"

	"github.com/attnrun/attnrun/ir"
)

// StepTime is how long one executed step of a profiled run took
// (RunOptions.Profile).
type StepTime struct {
	// Node is the step's node: a graph node, or a fused region's node.
	Node     *ir.Node
	Start    time.Time
	Duration time.Duration
}
